from chillfl.cli import entry

entry()
