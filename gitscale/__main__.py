from gitscale.cli import main

raise SystemExit(main())
