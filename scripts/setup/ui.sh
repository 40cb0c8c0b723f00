#!/usr/bin/env bash
# The web UI (ui/: Svelte 5, TypeScript, Vite).
#   scripts/setup/ui.sh build   install its packages (npm ci) when needed, build ui/dist
#                               (embedded into `catena serve` by the next cargo build)
#   scripts/setup/ui.sh check   type check (svelte-check) and unit tests (Vitest)
#   scripts/setup/ui.sh e2e     Playwright in Debian's Chromium against a real `catena serve`
#   scripts/setup/ui.sh types   regenerate ui/src/lib/generated (the TypeScript types of what the
#                               server and the desktop app send, from the Rust types: catena-service's
#                               test `typescript`, which fails while the committed files differ)
# Playwright never downloads a browser: it drives /usr/bin/chromium (installed by
# scripts/setup/packages.sh --tests).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib/common.sh"
cd "$root/ui"
export PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1

install() {
  if [ ! -d node_modules ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
    npm ci --no-audit --no-fund
  fi
}

case "${1:-build}" in
  build)
    install
    npx vite build
    ;;
  check)
    install
    npx svelte-check --tsconfig ./tsconfig.json --fail-on-warnings
    npx vitest run
    ;;
  types)
    cd "$root"
    CATENA_WRITE_TS=1 cargo test --release -p catena-service --lib typescript
    ;;
  e2e)
    install
    CATENA_BIN="${CATENA_BIN:-$target/release/catena}" npx playwright test
    ;;
  *)
    die "usage: scripts/setup/ui.sh build|check|e2e|types" 2
    ;;
esac
