from omnid.cli import entry

entry()
