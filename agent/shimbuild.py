"""`python -m tcluster.agent.shimbuild`: build the task supervisor once (make dev does),
printing its path, or say in one line what is missing."""

import sys

from tcluster.agent.runtime.shimbin import main

sys.exit(main())
