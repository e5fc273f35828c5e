"""Turn raw sleep recordings into ``partnd-sleep`` zarr stores.

Modules: :mod:`~preprocessing.physionet2018` (the PC18 command), :mod:`~preprocessing.ingest`
(any MNE-readable recording), :mod:`~preprocessing.pipeline` (the shared record pipeline),
:mod:`~preprocessing.signal_processing`, :mod:`~preprocessing.windowing`,
:mod:`~preprocessing.pc18_reader`, :mod:`~preprocessing.parallel`, :mod:`~preprocessing.manifest`
and :mod:`~preprocessing.errors`. See ``docs/preprocessing.md``.
"""

__all__: list[str] = []
