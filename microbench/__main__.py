from microbench.cli import main

raise SystemExit(main())
