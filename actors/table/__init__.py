"""A table's history: the ``TableActor`` (:mod:`.actor`), the Ray-free commit
coordinator it wraps (:mod:`.coordinator`), the log-level client and its
transactions (:mod:`.client`, :mod:`.transaction`), the opt-in commit
channel (:mod:`.channel`), the incarnation fence (:mod:`.incarnation`) and
the actor's metrics (:mod:`.metrics`)."""
