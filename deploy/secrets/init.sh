#!/usr/bin/env bash
# Creates the secret files that deploy/docker-compose.yml mounts under /run/secrets/hookgate/,
# for a first start: each missing file gets a fresh random `whsec_` value; existing files are
# left alone. Replace stripe-webhook-secret with the signing secret Stripe shows for your
# endpoint, and give each destination its signing secret. Files in this folder are git-ignored.
#
# Docker Compose bind-mounts these files unchanged, so the container's user (UID 10001) must
# be able to read them: as root this script makes them owned by 10001 with mode 0400;
# otherwise it makes them mode 0444 (readable by every local user) and says so.
set -euo pipefail
cd "$(dirname "$0")"
umask 077
for name in stripe-webhook-secret billing-signing-secret ci-signing-secret; do
  if [[ -e $name ]]; then
    echo "keep   secrets/$name"
    continue
  fi
  printf 'whsec_%s\n' "$(head -c 32 /dev/urandom | base64)" >"$name"
  echo "create secrets/$name"
done
for name in stripe-webhook-secret billing-signing-secret ci-signing-secret; do
  if [[ $(id -u) -eq 0 ]]; then
    chown 10001:10001 "$name"
    chmod 0400 "$name"
  else
    chmod 0444 "$name"
  fi
done
if [[ $(id -u) -ne 0 ]]; then
  echo "note: not root, so the files are mode 0444 (UID 10001 must read them);" \
    "run as root to make them owned by 10001 with mode 0400 instead" >&2
fi
