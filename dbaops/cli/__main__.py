from dbaops.cli import main

main()
