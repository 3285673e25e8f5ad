"""Devices reached over ssh or adb: transports (:mod:`.transport`), the POSIX scripts run on the
device (:mod:`.scripts`) and one analysis' session on one device (:mod:`.session`)."""
