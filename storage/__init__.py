"""All of raydelta's I/O (installed as ``raydelta.storage``): table storage and pyarrow.

Log stores (list, read, put-if-absent), snapshots, checkpoints, the data
writer and reader. A documented layer for log-level callers
(:func:`.snapshot.load_snapshot`, :func:`.data.writer.write_data`); every
other name is internal and may change between releases. The public API is
:data:`raydelta.__all__`.
"""
