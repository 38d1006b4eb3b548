from fleetplan.cli.app import main

main()
