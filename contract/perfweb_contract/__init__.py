"""The contract every part of perfweb shares: standard library only, and nothing of the project.

- `perfweb_contract.protocol`: the wire protocol (limits, names, metric units, packed arrays,
devices).
- `perfweb_contract.api`: every `/api/v1` path, the agent's requests and the server's routes alike.
- `perfweb_contract.layout`: the offline directory layout (offline mode, spill, upload, the CLI).
- `perfweb_contract.knobs`: the closed list of knobs (names, types, bounds, the finding each fixes).
- `perfweb_contract.verdicts`: the verdict names of an A/B measurement.
- `perfweb_contract.loaders`: which DataLoader is the training loop's (a DataLoader knob's target).

The layering is contract <- agent, recommender <- perfweb (DESIGN.md); the import-linter
contracts in pyproject.toml and tests/test_layering.py enforce it.
"""
