from tenter.cli.main import main

raise SystemExit(main())
