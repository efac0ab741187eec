"""A table's history, hosted: the table hosts (:mod:`.host`) and the tables
they hold (:mod:`.hosted`), where each table lives (:mod:`.placement`) and
the claim that makes its owner the only one (:mod:`.ownership`), the Ray-free
commit coordinator a hosted table wraps (:mod:`.coordinator`), the log-level
client and its transactions (:mod:`.client`, :mod:`.transaction`,
:mod:`.routing`), the opt-in commit channel (:mod:`.channel`), the
incarnation fence (:mod:`.incarnation`), subscriptions
(:mod:`.subscriptions`) and metrics (:mod:`.metrics`)."""
