#!/usr/bin/env bash
# Runs the product: installs what is missing (scripts/setup.sh), then serves the app with Vite at
# http://127.0.0.1:5173/, where it opens on the embedded default model.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec npm start
