from optimizer.cli.main import main

raise SystemExit(main())
