"`python -m transformerbook ...` (and `torchrun ... -m transformerbook train ...`): the `transformerbook` command."
from transformerbook.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
