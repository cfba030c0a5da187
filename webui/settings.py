# SPDX-License-Identifier: GPL-3.0-or-later
"""Safe defaults for the portal. No secrets live here.

Production values come from ``config.py`` in the instance folder (rendered by
``roles/carme_webui``) or from the file named by ``CARME_WEBUI_CONFIG``.
Every name below may be overridden there; see docs/portal.md for the list.
"""

from __future__ import annotations

from datetime import timedelta

# --- Flask core -------------------------------------------------------------
# SECRET_KEY has no default on purpose: create_app() refuses to start without it.
# A __Host- cookie: host-only, Path=/, Secure, so no other host (a session's app on a sibling domain) can set it.
SESSION_COOKIE_NAME = "__Host-carme_session"
SESSION_COOKIE_SECURE = True
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
PERMANENT_SESSION_LIFETIME = timedelta(hours=12)
PREFERRED_URL_SCHEME = "https"
MAX_CONTENT_LENGTH = 1024 * 1024
TEMPLATES_AUTO_RELOAD = False
# Number of reverse proxies in front of gunicorn whose X-Forwarded-* headers are trusted (nginx: 1).
PROXY_FIX_HOPS = 0

# --- CSRF (Flask-WTF) -------------------------------------------------------
WTF_CSRF_ENABLED = True
WTF_CSRF_TIME_LIMIT = None  # token lives as long as the session
WTF_CSRF_SSL_STRICT = True

# --- Security headers -------------------------------------------------------
HSTS_SECONDS = 31536000
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
    "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)

# --- Database ---------------------------------------------------------------
# Production: "mysql+pymysql://carme_webui:PASSWORD@127.0.0.1/carme_webui?charset=utf8mb4"
SQLALCHEMY_DATABASE_URI = "sqlite:///:memory:"
SQLALCHEMY_ENGINE_OPTIONS = {"pool_pre_ping": True}
SQLALCHEMY_TRACK_MODIFICATIONS = False

# --- LDAP -------------------------------------------------------------------
LDAP_URI = "ldaps://ldap.example.org"
LDAP_START_TLS = False  # set True with an ldap:// URI to upgrade the connection
LDAP_CA_FILE: str | None = None  # None: the system trust store
LDAP_ALLOW_PLAINTEXT = False  # plain ldap:// without StartTLS; tests only
LDAP_USER_DN_TEMPLATE = "uid={username},ou=people,dc=example,dc=org"
LDAP_GROUP_BASE = "ou=groups,dc=example,dc=org"
LDAP_GROUP_FILTER = "(&(objectClass=posixGroup)(memberUid={username}))"
LDAP_ADMIN_GROUP = "carme-admins"
LDAP_USER_GROUP: str | None = None  # if set, only members of this group may log in
LDAP_TIMEOUT_SECONDS = 5
# Who reads a logged-in user's groups again (admin flag, LDAP_USER_GROUP) without their password: None = anonymous.
LDAP_BIND_DN: str | None = None
LDAP_BIND_PASSWORD: str | None = None

# --- Login protection -------------------------------------------------------
USERNAME_PATTERN = r"^[a-z_][a-z0-9_.-]{0,31}$"
# Failed attempts: the reasons for these numbers are in webui/auth/lockout.py.
LOGIN_MAX_FAILURES = 10  # per user and client address, within LOGIN_LOCKOUT_SECONDS ...
LOGIN_LOCKOUT_SECONDS = 900  # ... refuse that address for that user this long
LOGIN_USER_MAX_FAILURES = 15  # per user from all addresses within LOGIN_USER_WINDOW_SECONDS
LOGIN_USER_WINDOW_SECONDS = 900  # ... refuse addresses without a full login in LOGIN_TRUSTED_SOURCE_DAYS
LOGIN_TRUSTED_SOURCE_DAYS = 30
LOGIN_BACKOFF_BASE_SECONDS = 0.25  # grows with each failure, capped below
LOGIN_BACKOFF_MAX_SECONDS = 2.0
LOGIN_MIN_RESPONSE_SECONDS = 0.3  # every failed attempt takes at least this long
TOTP_ISSUER = "Carme"
TOTP_VALID_WINDOW = 1  # accept codes from one 30 s step before/after
LOGIN_PENDING_SECONDS = 300  # time allowed between password and TOTP step
LOGIN_RECHECK_SECONDS = 60  # a login's LDAP groups (admin flag) are read again this often

# --- Slurm (slurmrestd, JWT) -----------------------------------------------
SLURMRESTD_URL = "http://127.0.0.1:6820"
# The OpenAPI version spoken with slurmrestd: "auto" asks it once per process which versions it offers and takes the
# newest Carme speaks (carme_runtime.slurmrest.SUPPORTED, Slurm 22.05's and 24.11's), or one of those names.
SLURMRESTD_API_VERSION = "auto"
SLURM_JWT_KEY_FILE = "/var/spool/slurmctld/jwt_hs256.key"
SLURM_JWT_LIFETIME_SECONDS = 600
SLURM_TIMEOUT_SECONDS = 5.0
# The full job list (read only after a job changed, webui/slurm/changed.py): 10,000 queued jobs are 77 MB and 4 to 9 s
# on the test bed under load; the pages of one worker wait for it, the next refreshes ask only whether anything changed.
SLURM_LIST_TIMEOUT_SECONDS = 30.0
# Identity used for the shared read cache (jobs/nodes/partitions).
SLURM_SERVICE_USER = "carme-portal"
# Identity used when an admin stops someone else's session (needs Slurm AdminLevel=Operator).
SLURM_ADMIN_USER = "carme-portal"
SLURM_FORBIDDEN_USERS = ("root", "slurm")
SCHEDULER_CACHE_SECONDS = 2.0
# While one of a user's sessions starts (running, its app not yet ready), the state it is shown from is at most this
# old (the dashboard asks every STARTING_POLL_SECONDS): Connect appears within about a second of the app being ready.
# One fetch per worker serves every user, so the scheduler calls grow with workers, not users, and only while a
# session starts.
STARTING_STATE_SECONDS = 0.5
STARTING_POLL_SECONDS = 0.5
# The dashboard's long poll while a session starts (GET /api/sessions?wait=): the answer comes when a watched session
# changes, from state at most LONG_POLL_STEP_SECONDS old; a worker lends at most LONG_POLL_SLOTS of its threads to
# waiting dashboards (beyond that they are answered at once and poll every STARTING_POLL_SECONDS).
LONG_POLL_WAIT_SECONDS = 3.0  # the start log under the row is read again after each answer
LONG_POLL_MAX_SECONDS = 10.0
LONG_POLL_STEP_SECONDS = 0.1
LONG_POLL_SLOTS = 8
PROXY_RECHECK_SECONDS = 0.5  # a proxied request for a session that looks not ready re-reads state at most this often
QUOTA_CACHE_SECONDS = 60.0
# Who is in which Slurm account (for the GPU-hours, read once for all users as SLURM_SERVICE_USER) is kept this long.
QUOTA_ASSOCIATIONS_CACHE_SECONDS = 300.0
# What the slurm role carried over the upgrade to Slurm 24.11 (its slurm_usage_carryover_file, JSON): in that month
# the portal adds the carried GPU-minutes to the usage and shows the declared budget; None: nothing carried
# (webui/quota/carryover.py, docs/upgrade.md "Budgets across the upgrade").
SLURM_USAGE_CARRYOVER_FILE: str | None = None
# Optional dotted path "module:callable" returning a webui.slurm.scheduler.Scheduler; tests inject fakes.
SCHEDULER_FACTORY: str | None = None
# Or a ready object implementing webui.slurm.scheduler.Scheduler (test_config only).
SCHEDULER: object | None = None

# --- History (webui/history) -----------------------------------------------
# The job history from before an upgrade (docs/upgrade.md "The job-history archive"): a directory of gzipped
# `sacct --json` archives (*.json.gz) that the history page shows each user their own jobs of; "": none.
HISTORY_ARCHIVE_DIR = ""
HISTORY_ARCHIVE_LABEL = "Before the upgrade"  # the heading of an archive's jobs, with its Slurm release
HISTORY_ARCHIVE_MAX_BYTES = 256 * 1024 * 1024  # an archive larger than this unpacked is an error line, not read

# --- Sessions ---------------------------------------------------------------
CARME_APP_DIRS = ("/etc/carme/apps.d",)  # site app specs, on top of carme_runtime's built-in ones
SESSION_DEFAULT_PARTITION: str | None = None
SESSION_DEFAULT_CPUS = 4
SESSION_DEFAULT_MEM_MB = 16000
# What the start form's CPUs and memory may ask for, per node (issue 30); carme_runtime checks the same bounds again.
# None: the default's value (SESSION_DEFAULT_CPUS, SESSION_DEFAULT_MEM_MB), so a session asks for no more than today.
SESSION_MAX_CPUS: int | None = None
SESSION_MAX_MEM_MB: int | None = None
# Session profiles from the inventory (carme_webui_session_profiles): [{"name", "title", "description", "app",
# "image", "gpus", "cpus", "mem_mb", "time_minutes"}], written into the table by `flask --app webui profiles-sync`.
SESSION_PROFILES: tuple[dict[str, object], ...] = ()
# The inventory's projects' owner and end date (carme_webui_project_terms): {"account": {"pi": "alice", "end_date":
# "2027-06-30"}}; a portal project keeps its own in the portal's table (webui.projects.terms).
PROJECT_TERMS: dict[str, dict[str, str]] = {}
SESSION_MAX_TIME_MINUTES = 24 * 60
# Nodes one session may ask for (multi-node sessions; the app runs on the first). Keep it equal to the session QOS's
# MaxTRESPerJob=node=N, which Slurm enforces for every submission path (roles/slurm README "Limits").
SESSION_MAX_NODES = 1
SESSION_WORKDIR_TEMPLATE = "/home/{user}"
SESSION_QOS: str | None = None
SESSION_ACCOUNT: str | None = None
# Runtime of catalogue entries of kind "container" (carme_runtime: apptainer | charliecloud); the nodes' runtime
CONTAINER_RUNTIME = "apptainer"
READINESS_TIMEOUT_SECONDS = 1.0
READINESS_CACHE_SECONDS = 5.0
# An owner's click on Connect for a session that looks not ready: one look at its app with this timeout
CONNECT_PROBE_TIMEOUT_SECONDS = 5.0
# Admins do not get into a user's IDE through the proxy unless this is True.
PROXY_ADMIN_ACCESS = False
# The proxy reaches only a session front that proved it knows the session secret (docs/portal.md, "Session fronts").
PROXY_PORT_RANGE = (32768, 60999)  # ports the portal challenges and proxies to (carme_runtime.front.PORT_RANGE)
PROXY_VERIFY_CACHE_SECONDS = 60.0  # how long a front's proof is reused
PROXY_AUTH_CACHE_SECONDS = 300.0  # database down: a grant confirmed this long ago still authorises; 0 = never
# An origin per session (webui/sessions/app_origin.py): a wildcard origin "https://*.apps.example.org[:port]", served by
# nginx's apps server block with a wildcard certificate; session J lives at https://J-<tag>.apps.example.org. Empty:
# apps under /proxy/ on the portal's origin, where a script in an app can call the portal and every other session
# (development only; the carme_webui role always sets it). PORTAL_URL: where the apps' origin sends a browser back.
APPS_ORIGIN = ""
PORTAL_URL = ""
APP_TICKET_SECONDS = 60.0  # how long a Connect ticket may take to reach the apps' origin
# Refuse requests that browsers mark as cross-site or same-site (Sec-Fetch-Site), except top-level navigations:
# a page on the apps' origin (same site, other origin) cannot make the user's browser call the portal.
FETCH_METADATA_POLICY = True

# --- Storage (webui/sessions/storage.py) ----------------------------------------------
# Datasets shown in the start form: [{"name", "path", "readonly", "description"}] (the inventory's carme_datasets).
DATASETS: tuple[dict[str, object], ...] = ()
# "beegfs": show each user's BeeGFS quota (beegfs-ctl --getquota) beside GPU-hours; "": not available.
STORAGE_QUOTA = ""
STORAGE_QUOTA_COMMAND = ("beegfs-ctl",)

# --- Reservations (issue 16; webui/reservations/policy.py, docs/portal.md "Reservations") --------------------
RESERVATION_MAX_GPUS = 2  # per request, all nodes together
RESERVATION_MAX_NODES = 1
RESERVATION_MAX_GPU_HOURS_PER_MONTH = 48.0  # reserved GPU-hours per user and month approved without an admin
RESERVATION_MAX_DAYS_AHEAD = 30
RESERVATION_MIN_MINUTES = 30
RESERVATION_MAX_MINUTES = 8 * 60
RESERVATION_AUTO_APPROVE = True  # False: an administrator decides every request
RESERVATION_PARTITION: str | None = None  # the partition whose nodes are reserved; None: the sessions' default
# How the portal runs scontrol (as its own Unix user, a Slurm Operator): slurmrestd 22.05 cannot create reservations.
SLURM_SCONTROL = ("scontrol",)
SLURM_CONF_FILE: str | None = None  # SLURM_CONF for scontrol; None: scontrol's default (/etc/slurm/slurm.conf)
# A ready object implementing webui.reservations.slurm.Reservations (test_config only).
RESERVATIONS: object | None = None
RESERVATION_TIMEZONE = "UTC"  # the forms and the calendar speak this zone

# --- Monitoring (Zabbix, roles/zabbix_server) --------------------------------
# None: no monitoring. Else the frontend's URL, e.g. "https://127.0.0.1:8445/", with the read-only API user.
ZABBIX_URL: str | None = None
ZABBIX_USER = "carme-api"
ZABBIX_PASSWORD: str | None = None
ZABBIX_CA_FILE: str | None = None  # the frontend's certificate (self-signed) or its CA; None: the system trust store
ZABBIX_TIMEOUT_SECONDS = 5
ZABBIX_CACHE_SECONDS = 30  # one host.get per this many seconds and worker, shared by every user

# --- Notifications (issue 31; webui/notifications, docs/portal.md "Notifications") ----------------------------------
# The SMTP relay notifications are mailed through, "host:port" (port 25 if left out); "": shown in the portal only.
MAIL_RELAY = ""
MAIL_FROM = "carme@localhost"
MAIL_STARTTLS = False  # upgrade the relay connection with STARTTLS (certificate checked against MAIL_CA_FILE)
MAIL_CA_FILE: str | None = None  # None: the system trust store
MAIL_TIMEOUT_SECONDS = 10.0
# A user's address: this attribute of their LDAP entry (read as LDAP_BIND_DN, or anonymously); "": not asked ...
MAIL_LDAP_ATTRIBUTE = "mail"
MAIL_DOMAIN = ""  # ... else user@MAIL_DOMAIN; "": no mail for a user without an address in LDAP
MAIL_RETRY_HOURS = 24.0  # a notification the relay did not take is tried again at each check, this long
