"""Support for the tests: loopback servers, child processes, fixtures' building blocks, test vectors."""
