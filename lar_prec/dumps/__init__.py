"""Stage 2: what load_and_run writes, read into typed frozen records.

Binary ``--bin-io-dump`` files and folders (:mod:`.binary`, :mod:`.folder`), their titles
(:mod:`.titles`), the dtype table (:mod:`.dtypes`), text ``--io-dump`` files (:mod:`.textdump`)
and MegEngine's fast-run algorithm cache (:mod:`.algocache`). numpy only, no megengine.
"""
