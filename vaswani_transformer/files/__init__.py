"""Files and names on this machine, one role per module:

- `paths`: whether a name is a local path or a Hub id, input files that are there, outputs kept apart from inputs;
- `partials`: the temporary names writers write under, and the removal of those that dead writers left;
- `writing`: writes that never leave a partial file or folder, and the machine's refusals said with the path;
- `manifests`: content hashes, and cache entries that prove themselves (a manifest) before reuse;
- `reading`: JSON and UTF-8 text read with errors that name the file and the fix.
"""
