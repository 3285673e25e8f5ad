"""``lar-prec devices``: one configuration on several targets against one naive reference
(:mod:`.devices`)."""
