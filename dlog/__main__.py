from dlog.cli import main

main()
