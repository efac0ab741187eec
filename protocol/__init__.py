"""The Delta protocol as pure Python (installed as ``raydelta.protocol``).

Values in, values out: no file, clock or Ray. The pydantic models of every
action (:mod:`.actions`) and the typed events actor handles take and return
(:mod:`.events`) are a documented layer for log-level callers; every other
module here is internal to raydelta and may change between releases. The
public API is :data:`raydelta.__all__`.
"""
