"""End-to-end tests (a package, so that their module names never collide with the
integration tests of the same name, e.g. test_wizard)."""
