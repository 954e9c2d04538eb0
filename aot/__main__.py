from aot.cli import main

main()
