#!/usr/bin/env bash
# databases.sh starts (or stops) throw-away PostgreSQL and MariaDB servers for the
# storage contract tests, on loopback only:
#   PostgreSQL  127.0.0.1:55432   data in $WORK/pg
#   MariaDB     127.0.0.1:53306   data in $WORK/mysql
# where WORK is ${HEADWAY_CI_WORK:-<repo>/.ci-work}. Both servers get a login
# `headway` / password `headway` allowed to create databases, because every test
# run creates its own uniquely named database and drops it afterwards.
#
#   eval "$(bash .ci/databases.sh start)"   # exports HEADWAY_TEST_*_URL
#   bash .ci/databases.sh stop
#
# Runs as root on Debian 12 without systemd. Missing packages are installed with
# apt-get. `start` is idempotent: servers already running are left alone and the
# export lines are printed again. Only the export lines go to stdout; progress
# goes to stderr.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WORK="${HEADWAY_CI_WORK:-$REPO/.ci-work}"
PG_PORT=55432
MY_PORT=53306
DB_USER=headway
DB_PASS=headway
DB_NAME=headway
PG_DATA="$WORK/pg"
MY_DATA="$WORK/mysql"
# Sockets live in /tmp: socket paths are limited to ~107 bytes and the repo path may be long.
PG_SOCKET_DIR=/tmp
MY_SOCKET="/tmp/headway-mariadb-$MY_PORT.sock"
MY_PIDFILE="$MY_DATA/mariadb.pid"

log() { echo "databases: $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

[ "$(id -u)" = 0 ] || die "must run as root (it installs packages and runs servers as the postgres/mysql users)"

APT_UPDATED=0
# apt_install installs packages without letting their maintainer scripts start
# services on the default ports (Debian starts them unless policy-rc.d says no).
apt_install() {
  export DEBIAN_FRONTEND=noninteractive
  local added_policy=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
    chmod +x /usr/sbin/policy-rc.d
    added_policy=1
  fi
  if [ "$APT_UPDATED" = 0 ]; then
    log "apt-get update"
    apt-get update -qq >&2
    APT_UPDATED=1
  fi
  log "apt-get install $*"
  local rc=0
  apt-get install -y -qq --no-install-recommends "$@" >&2 || rc=$?
  [ "$added_policy" = 1 ] && rm -f /usr/sbin/policy-rc.d
  [ "$rc" = 0 ] || die "apt-get install $* failed (exit $rc)"
}

# pg_bindir prints the newest Debian PostgreSQL bin directory (not /usr/local/bin,
# which may hold unrelated builds).
pg_bindir() {
  local d
  d="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)"
  [ -n "$d" ] && [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ] && echo "$d"
}

# ensure_owned_dir makes dir owned by user, falling back to a /tmp location when
# that user cannot reach it (e.g. the repo sits under a 0700 home directory).
ensure_owned_dir() {
  local dir="$1" user="$2"
  mkdir -p "$dir"
  chown "$user:" "$dir"
  chmod 700 "$dir"
  runuser -u "$user" -- test -w "$dir"
}

# ---------------------------------------------------------------- PostgreSQL

pg_running() {
  local bin="$1"
  [ -f "$PG_DATA/PG_VERSION" ] && runuser -u postgres -- "$bin/pg_ctl" -D "$PG_DATA" status >/dev/null 2>&1
}

pg_psql() {
  # Local socket connections use trust auth (set at initdb); TCP needs the password.
  runuser -u postgres -- psql -X -q -v ON_ERROR_STOP=1 -h "$PG_SOCKET_DIR" -p "$PG_PORT" -d postgres "$@"
}

start_postgres() {
  local bin
  bin="$(pg_bindir || true)"
  if [ -z "$bin" ] || ! command -v psql >/dev/null 2>&1; then
    apt_install postgresql postgresql-client
    bin="$(pg_bindir || true)"
    [ -n "$bin" ] || die "postgresql installed but no /usr/lib/postgresql/*/bin/initdb found"
  fi
  id postgres >/dev/null 2>&1 || die "the postgres system user is missing (the postgresql package creates it)"

  if ! ensure_owned_dir "$PG_DATA" postgres; then
    PG_DATA="/tmp/headway-ci-work/pg"
    log "postgres cannot write under $WORK; using $PG_DATA"
    mkdir -p /tmp/headway-ci-work
    ensure_owned_dir "$PG_DATA" postgres || die "cannot prepare $PG_DATA for the postgres user"
  fi
  if pg_running "$bin"; then
    log "postgres already running on 127.0.0.1:$PG_PORT ($PG_DATA)"
  else
    if [ ! -f "$PG_DATA/PG_VERSION" ]; then
      log "initdb $PG_DATA ($bin)"
      runuser -u postgres -- "$bin/initdb" -D "$PG_DATA" -U postgres -E UTF8 --locale=C \
        --auth-local=trust --auth-host=scram-sha-256 >&2
    fi
    log "starting postgres on 127.0.0.1:$PG_PORT"
    runuser -u postgres -- "$bin/pg_ctl" -D "$PG_DATA" -l "$PG_DATA/server.log" \
      -o "-p $PG_PORT -k $PG_SOCKET_DIR -c listen_addresses=127.0.0.1" start -w -t 60 >&2 \
      || { tail -n 20 "$PG_DATA/server.log" >&2 || true; die "postgres did not start"; }
  fi

  pg_psql <<SQL >&2
DO \$\$
BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '$DB_USER') THEN
    CREATE ROLE $DB_USER LOGIN CREATEDB PASSWORD '$DB_PASS';
  ELSE
    ALTER ROLE $DB_USER LOGIN CREATEDB PASSWORD '$DB_PASS';
  END IF;
END
\$\$;
SQL
  if [ "$(pg_psql -tAc "SELECT 1 FROM pg_database WHERE datname = '$DB_NAME'")" != 1 ]; then
    pg_psql -c "CREATE DATABASE $DB_NAME OWNER $DB_USER" >&2
  fi
  log "postgres ready"
}

stop_postgres() {
  local bin
  bin="$(pg_bindir || true)"
  [ -n "$bin" ] || { log "postgres not installed"; return 0; }
  local dir
  for dir in "$PG_DATA" /tmp/headway-ci-work/pg; do
    if [ -f "$dir/PG_VERSION" ] && runuser -u postgres -- "$bin/pg_ctl" -D "$dir" status >/dev/null 2>&1; then
      log "stopping postgres ($dir)"
      runuser -u postgres -- "$bin/pg_ctl" -D "$dir" stop -m fast -w >&2
    fi
  done
}

# ------------------------------------------------------------------- MariaDB

my_admin() { mariadb-admin --no-defaults --socket="$MY_SOCKET" -u root "$@"; }
my_running() { command -v mariadb-admin >/dev/null 2>&1 && my_admin ping >/dev/null 2>&1; }

start_mariadb() {
  if ! command -v mariadbd >/dev/null 2>&1 && [ ! -x /usr/sbin/mariadbd ]; then
    apt_install mariadb-server mariadb-client
  fi
  local mariadbd_bin
  mariadbd_bin="$(command -v mariadbd || echo /usr/sbin/mariadbd)"
  id mysql >/dev/null 2>&1 || die "the mysql system user is missing (the mariadb-server package creates it)"

  if my_running; then
    log "mariadb already running on 127.0.0.1:$MY_PORT ($MY_SOCKET)"
  else
    if ! ensure_owned_dir "$MY_DATA" mysql; then
      MY_DATA="/tmp/headway-ci-work/mysql"
      MY_PIDFILE="$MY_DATA/mariadb.pid"
      log "mysql cannot write under $WORK; using $MY_DATA"
      mkdir -p /tmp/headway-ci-work
      ensure_owned_dir "$MY_DATA" mysql || die "cannot prepare $MY_DATA for the mysql user"
    fi
    if [ ! -d "$MY_DATA/mysql" ]; then
      log "mariadb-install-db $MY_DATA"
      mariadb-install-db --no-defaults --datadir="$MY_DATA" --user=mysql \
        --auth-root-authentication-method=socket --skip-test-db >&2
    fi
    log "starting mariadb on 127.0.0.1:$MY_PORT"
    # setsid + nohup: the server outlives this script and the caller's terminal.
    setsid nohup "$mariadbd_bin" --no-defaults --user=mysql --datadir="$MY_DATA" \
      --port="$MY_PORT" --bind-address=127.0.0.1 --socket="$MY_SOCKET" \
      --pid-file="$MY_PIDFILE" --log-error="$MY_DATA/server.err" \
      --character-set-server=utf8mb4 --collation-server=utf8mb4_bin \
      --max-connections=200 >/dev/null 2>&1 < /dev/null &
    local i
    for i in $(seq 1 60); do
      my_running && break
      sleep 1
    done
    my_running || { tail -n 20 "$MY_DATA/server.err" >&2 || true; die "mariadb did not answer on $MY_SOCKET within 60s"; }
  fi

  mariadb --no-defaults --socket="$MY_SOCKET" -u root <<SQL >&2
CREATE USER IF NOT EXISTS '$DB_USER'@'%' IDENTIFIED BY '$DB_PASS';
CREATE USER IF NOT EXISTS '$DB_USER'@'localhost' IDENTIFIED BY '$DB_PASS';
ALTER USER '$DB_USER'@'%' IDENTIFIED BY '$DB_PASS';
ALTER USER '$DB_USER'@'localhost' IDENTIFIED BY '$DB_PASS';
GRANT ALL PRIVILEGES ON *.* TO '$DB_USER'@'%';
GRANT ALL PRIVILEGES ON *.* TO '$DB_USER'@'localhost';
CREATE DATABASE IF NOT EXISTS \`$DB_NAME\` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
FLUSH PRIVILEGES;
SQL
  log "mariadb ready"
}

stop_mariadb() {
  if my_running; then
    log "stopping mariadb"
    my_admin shutdown >&2
  else
    log "mariadb not running"
  fi
}

case "${1:-}" in
  start)
    start_postgres
    start_mariadb
    echo "export HEADWAY_TEST_POSTGRES_URL=postgres://$DB_USER:$DB_PASS@127.0.0.1:$PG_PORT/$DB_NAME"
    echo "export HEADWAY_TEST_MYSQL_URL=mysql://$DB_USER:$DB_PASS@127.0.0.1:$MY_PORT/$DB_NAME"
    ;;
  stop)
    stop_postgres
    stop_mariadb
    ;;
  *)
    echo "usage: $0 start|stop" >&2
    exit 2
    ;;
esac
