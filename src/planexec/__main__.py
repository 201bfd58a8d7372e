from planexec.cli import entry

entry()
