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

# Builds into a scratch folder and copies into ui/dist only the files whose bytes changed (and
# removes those no longer built). Cargo watches ui/dist by file times (crates/server/build.rs), so
# a rebuild that writes the same bytes (Vite's output is the same for the same sources) would
# otherwise recompile the server and relink every binary: three minutes of the test suite, where
# the desktop package's step builds the UI a second time.
build() {
  local file
  next="$(mktemp -d "$root/ui/.dist-next.XXXXXX")" # global: the EXIT trap runs after the function
  trap 'rm -rf "$next"' EXIT
  npx vite build --outDir "$next" --emptyOutDir
  mkdir -p dist
  (cd dist && find . -type f) | while IFS= read -r file; do
    [ -e "$next/$file" ] || rm -f "dist/$file"
  done
  (cd "$next" && find . -type f) | while IFS= read -r file; do
    if ! cmp -s "$next/$file" "dist/$file"; then
      mkdir -p "dist/$(dirname "$file")"
      cp "$next/$file" "dist/$file"
    fi
  done
  find dist -mindepth 1 -type d -empty -delete
}

install() {
  if [ ! -d node_modules ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
    npm ci --no-audit --no-fund
  fi
}

case "${1:-build}" in
  build)
    install
    build
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
