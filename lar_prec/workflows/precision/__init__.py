"""The deployment-precision commands: ``lar-prec mixed`` (:mod:`.mixed`, its records and curve
:mod:`.mixed_points`) and ``lar-prec quant`` (:mod:`.quant`)."""
