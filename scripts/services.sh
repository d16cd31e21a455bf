#!/usr/bin/env bash
# Make sure the services the integration tests talk to are up: PostgreSQL on
# 127.0.0.1:5432 and Redis on 127.0.0.1:6379. Starts an installed-but-stopped service
# with the machine's usual command; fails loudly (exit 1) when one cannot be reached.
set -uo pipefail

pg_up() { pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; }
redis_up() { (exec 3<>/dev/tcp/127.0.0.1/6379 && printf 'PING\r\n' >&3 && read -r -t 2 reply <&3 && [[ $reply == +PONG* ]]) 2>/dev/null; }

wait_for() {  # wait_for NAME CHECK
  for _ in $(seq 1 30); do "$2" && return 0; sleep 1; done
  echo "services: $1 did not come up" >&2; return 1
}

if ! pg_up; then
  echo "services: PostgreSQL is down; starting it" >&2
  if command -v pg_ctlcluster >/dev/null 2>&1 && [ -d /etc/postgresql ]; then
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start || true
  fi
  wait_for PostgreSQL pg_up || { echo "services: install PostgreSQL (127.0.0.1:5432, trust auth for user postgres)" >&2; exit 1; }
fi

if ! redis_up; then
  echo "services: Redis is down; starting it" >&2
  if command -v redis-server >/dev/null 2>&1; then
    mkdir -p /var/lib/redis /var/log/redis 2>/dev/null || true
    redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
      --dir /var/lib/redis --logfile /var/log/redis/ci.log || true
  fi
  wait_for Redis redis_up || { echo "services: install Redis (127.0.0.1:6379)" >&2; exit 1; }
fi
echo "services: PostgreSQL and Redis are up" >&2
