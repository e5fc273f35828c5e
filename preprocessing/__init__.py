"""Turn raw sleep recordings into ``partnd-sleep`` zarr stores.

Installed as ``partnd.preprocessing`` (the folder sits at the top of the repository).
Modules: :mod:`~partnd.preprocessing.physionet2018` (the PC18 command),
:mod:`~partnd.preprocessing.ingest` (any MNE-readable recording),
:mod:`~partnd.preprocessing.dataset_ingest` (a dataset directory: pairing, parallel, resumable),
:mod:`~partnd.preprocessing.ingest_command` (``partnd ingest``),
:mod:`~partnd.preprocessing.channel_maps` (naming, renaming and deriving channels),
:mod:`~partnd.preprocessing.pipeline` (the shared record pipeline),
:mod:`~partnd.preprocessing.signal_processing`, :mod:`~partnd.preprocessing.windowing`,
:mod:`~partnd.preprocessing.pc18_reader`, :mod:`~partnd.preprocessing.parallel`,
:mod:`~partnd.preprocessing.manifest` and :mod:`~partnd.preprocessing.errors`.
See ``docs/preprocessing.md``.
"""

__all__: list[str] = []
