"""What the tests share that is not a fixture: data, tiny models, runs and Marian folders, one
module a layer (`from helpers.corpus import PAIRS`). tests/ is on the path (pyproject.toml's
pytest `pythonpath`), so every test folder imports them alike; fixtures are in conftest.py
files, the shared ones in tests/conftest.py, the others beside the tests that use them."""
