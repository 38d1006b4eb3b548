from fleetplan.cli.entry import main

main()
