from planexec.cli import main

main()
