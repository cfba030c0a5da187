# Carme: the two commands of the README are `make demo` and `make test`. Both do all setup on a fresh machine
# (Debian 12, root): podman/runc/debootstrap, the virtualenv, the node image.
SHELL := /bin/bash
.ONESHELL:
.SHELLFLAGS := -eu -o pipefail -c
VENV := .venv
PY := $(VENV)/bin/python
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
SCENARIOS ?= $(patsubst molecule/%/molecule.yml,%,$(wildcard molecule/*/molecule.yml))
MOLECULE_LOCK := /tmp/carme-molecule.lock
# The Debian release of the node image, the demo and the Molecule scenarios: trixie (Debian 13, the default, named in
# images/node/default-release) or bookworm (Debian 12), e.g. `CARME_RELEASE=bookworm make demo`. The scripts and
# `carme demo` read both variables.
export CARME_RELEASE ?= $(shell cat images/node/default-release)
export CARME_NODE_IMAGE ?= localhost/carme-node:$(if $(filter trixie,$(CARME_RELEASE)),debian13,debian12)
# `carme demo up` options; .ci/run sets --replace (a demo left by another checkout is deleted, not refused)
DEMO_UP_FLAGS ?=

.PHONY: app-bundles debian12-parts session-images demo demo-down demo-status deploy test lint unit molecule e2e e2e-tests test-trixie test-site test-upgrade axe host image wheelhouse venv bench clean

# Inside `make test` the shared setup has run once already (CARME_PREPARED=1): the lines of work that run at once must
# not each run host-setup (apt's lock), the image check or netcheck again.
PREPARE = $(if $(CARME_PREPARED),,host venv image wheelhouse)

demo: $(PREPARE) app-bundles session-images ## bring up the embedded demo cluster and deploy site.yml on it
	carme demo up $(DEMO_UP_FLAGS)

# The demo's container session image (Charliecloud), built once per recipe into /var/lib/carme/images, which the demo
# nodes mount read-only. Needs the wheelhouse and the code-server bundle (app-bundles).
session-images: app-bundles
	bash scripts/session-images.sh

# Apps the demo installs from an archive (code-server, built from npm once per version; cached with the wheels).
# Only the demo needs them, so they are built on its line of `make test`, not in the shared setup. The session images
# are Debian 12 (images/session/base.def) whatever the nodes run: on another release they need Debian 12's parts.
app-bundles: $(if $(filter bookworm,$(CARME_RELEASE)),,debian12-parts)
	bash scripts/code-server-bundle.sh

# Debian 12's node image, its Python's wheels and its code-server build, on another release too: for the session
# images (Debian 12) and Molecule's Debian 12 smoke set. Each built once per recipe or content.
debian12-parts:
	export CARME_RELEASE=bookworm CARME_NODE_IMAGE=$(DEBIAN12_IMAGE)
	bash images/node/build.sh
	bash scripts/wheelhouse.sh
	bash scripts/code-server-bundle.sh

demo-down: venv
	carme demo down

demo-status: venv
	carme demo status

deploy: venv ## deploy site.yml on the default inventory
	carme deploy

# Everything CI runs. Four lines of work at once, each timed: Molecule, the site scenario and "lint, then pytest" in
# the background (logs in .artifacts/, printed at the end), the demo in the foreground, then the end-to-end tests
# against it.
# On 2 cores this pays because much of each line is waiting (Slurm's scheduler and accounting, systemd, the apps'
# start), not CPU. `make test SERIAL=1`: one after another.
SERIAL ?=
test:
	# step's status is make's: called after || (or in a subshell whose status is kept), bash ignores -e inside it
	step() {
	  local s=$$(date +%s) rc=0
	  $(MAKE) --no-print-directory "$$@" || rc=$$?
	  echo "=== make $$*: $$(( $$(date +%s) - s )) s, exit $$rc"
	  return $$rc
	}
	step host venv image wheelhouse
	export CARME_PREPARED=1
	if [ -n "$(SERIAL)" ]; then
	  step lint unit molecule demo e2e-tests test-upgrade
	  exit 0
	fi
	mkdir -p .artifacts
	# the background lines run niced: the demo and the browser tests after it are the longest line, and the others fill
	# the time it waits (for Slurm, for the apps)
	background() {
	  local name=$$1; shift
	  ( renice -n 10 -p $$BASHPID > /dev/null; rc=0
	    step "$$@" > .artifacts/$$name.log 2>&1 || rc=$$?; echo $$rc > .artifacts/$$name.rc ) &
	}
	cpu() { awk '/^cpu /{print $$2+$$3+$$4+$$7+$$8, $$5+$$6}' /proc/stat; }
	read -r busy0 idle0 < <(cpu)
	background molecule molecule
	background site test-site
	background checks lint unit
	echo "=== make molecule, test-site and lint unit: in the background, logs in .artifacts/{molecule,site,checks}.log"
	rc=0
	step demo 2>&1 | tee .artifacts/demo.log || rc=$$?
	demo_rc=$$rc
	# the browser tests run beside Molecule and the site scenario, whose podman networks come and go: chromium runs in
	# a network namespace of its own, which sees none of that (tests/fixtures/browser_netns.py)
	[ $$rc = 0 ] && { step e2e-tests 2>&1 | tee .artifacts/e2e-tests.log || rc=$$?; }
	# last on this line, as it replaces the Debian 13 demo: the upgrade scenario (Debian 12 demo, carme upgrade killed
	# and run again, --rollback), run even when a browser test failed, so that one CI run tells both
	[ $$demo_rc = 0 ] && { step test-upgrade 2>&1 | tee .artifacts/upgrade.log || rc=$$?; }
	wait
	for name in checks molecule site; do
	  echo "=== $$name log"; cat .artifacts/$$name.log
	  [ "$$(cat .artifacts/$$name.rc)" = 0 ] || rc=1
	done
	# CI shows only the end of this output: say there what ran, how it ended and which tests failed
	read -r busy1 idle1 < <(cpu)
	echo "=== summary"
	grep -h -E '^=== make |^(FAILED|ERROR) |^[0-9]+ (passed|failed)|^=+ .*(passed|failed|error).* =+$$|^CRITICAL |failed=[1-9]' \
	  .artifacts/demo.log .artifacts/e2e-tests.log .artifacts/upgrade.log .artifacts/checks.log .artifacts/molecule.log .artifacts/site.log \
	  2>/dev/null \
	  | sed 's/\x1b\[[0-9;]*m//g' | cut -c1-300 || true
	echo "=== CPU busy $$(( 100 * (busy1 - busy0) / (busy1 - busy0 + idle1 - idle0 + 1) )) % of $$(nproc) cores"
	exit $$rc

# under `make test` (and CI=true) a test whose real component is missing fails instead of skipping
test: export CARME_REQUIRED = 1

host:
	bash scripts/host-setup.sh

wheelhouse: venv image ## the wheels the test-bed nodes install (built once per content, cached in /var/cache/carme)
	bash scripts/wheelhouse.sh

image: host ## the node image (rebuilt only when its recipe changes), then prove containers resolve each other
	bash images/node/build.sh
	bash scripts/netcheck.sh

venv: $(VENV)/.stamp
$(VENV)/.stamp: pyproject.toml requirements/constraints.txt requirements/tools.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip 2>&1 | grep -v "^WARNING: Location" || true
	$(PY) -m pip install -q -c requirements/constraints.txt -r requirements/tools.txt -e '.[webui,admin,images,dev]' 2>&1 | grep -v "^WARNING: Location" || true
	$(PY) -c "import ansible, molecule, ansible_runner, flask, carme_runtime, carme_admin, webui"
	touch $@

lint: venv
	yamllint -s .
	ansible-lint
	ruff check .
	mypy
	$(PY) scripts/docs-check.py

unit: venv ## pytest: unit tests plus host-level integration tests (real Slurm, slapd; needs root)
	pytest -m "not e2e" --durations=25

e2e: demo ## the browser end-to-end tests against the demo (brought up first); a missing demo fails, never skips
	$(MAKE) --no-print-directory e2e-tests

e2e-tests: venv axe ## the browser end-to-end and reliability tests against the demo as it is (a missing demo fails)
	CARME_E2E_REQUIRED=1 pytest -m e2e --durations=30 tests/e2e tests/reliability

# The opt-in Debian 13 tests, not part of `make test`: Slurm 24.11's slurmrestd (the adapter, auto -> v0.0.42) and its
# GPU limits for whole-node jobs, GPU reservations, and Apptainer; each starts throwaway containers from the trixie node image (build it
# first: CARME_RELEASE=trixie make image). A missing image fails here; a skip inside a test fails too (CARME_REQUIRED).
TRIXIE_IMAGE := localhost/carme-node:debian13
TRIXIE_TESTS := tests/integration/test_slurmrestd_trixie.py tests/integration/test_exclusive_limits_trixie.py \
  tests/integration/test_reservations_trixie.py tests/integration/test_slurmdbd_gap_trixie.py \
  $(wildcard tests/runtime/test_apptainer_real.py)
test-trixie: venv ## the opt-in Debian 13 tests: Slurm 24.11, Apptainer (needs the image localhost/carme-node:debian13)
	podman image exists $(TRIXIE_IMAGE) || { echo "no image $(TRIXIE_IMAGE): CARME_RELEASE=trixie make image" >&2; exit 1; }
	CARME_SLURM2411_TESTS=1 CARME_APPTAINER_TESTS=1 CARME_REQUIRED=1 pytest -q $(TRIXIE_TESTS)

# The `site` scenario (issue 29), a line of `make test`: two nodes on a podman network with no route out, reached
# over SSH as `deploy` with sudo by a non-root controller account (carme-ctl), the inventory from docs/site-guide.md's
# `carme site init` with its vault, a site CA, every package from the offline bundle (built once into SITE_BUNDLE,
# else verified), the guide's own commands (tests/site/guide.py).
SITE_BUNDLE ?= /var/tmp/carme-site-bundle-$(CARME_RELEASE)
test-site: $(PREPARE) ## the site scenario alone: SSH, sudo, vault, site CA, offline bundle (tests/site)
	if [ -f $(SITE_BUNDLE)/manifest.json ]; then carme bundle verify $(SITE_BUNDLE) --release $(CARME_RELEASE)
	else rm -rf $(SITE_BUNDLE); carme bundle build --release $(CARME_RELEASE) --out $(SITE_BUNDLE); fi
	CARME_SITE_TESTS=1 CARME_SITE_BUNDLE=$(SITE_BUNDLE) CARME_REQUIRED=1 pytest -q -s tests/site

# The upgrade scenario (issue 34, docs/upgrade.md "Upgrade path"), the last step of `make test`'s demo line (about
# 27 min): a fresh Debian 12 demo (the demo of this checkout removed first, its volumes too; the Debian 12 image and
# wheels prepared here even inside `make test`, each a no-op when built), then alice, bob and carol leave their traces,
# `carme upgrade` is killed in its hosts stage and run again to Debian 13, the users' things are checked, the hosts are
# recreated from Debian 12's image and `carme upgrade --rollback` brings the cluster of before back. It leaves a
# Debian 12 demo.
test-upgrade: venv ## the upgrade scenario on the demo: Debian 12 -> 13 (killed, rerun), then --rollback (tests/upgrade)
	carme demo down
	CARME_PREPARED= CARME_RELEASE=bookworm CARME_NODE_IMAGE=$(DEBIAN12_IMAGE) $(MAKE) --no-print-directory demo
	CARME_UPGRADE_TESTS=1 CARME_E2E_REQUIRED=1 CARME_REQUIRED=1 pytest -s -m e2e --durations=5 tests/upgrade

# axe-core from npm (pinned in the script, installed once into the git-ignored .cache/axe): the accessibility audit
# the browser tests run in the portal's pages (tests/fixtures/axe.py)
axe:
	bash scripts/axe.sh

# Molecule: the scenarios on the release's image (CARME_NODE_IMAGE), one after another; containers and slurm_external
# name Debian 12's image. On another release than bookworm, the Debian 12 smoke set follows: SMOKE12 (cluster, unless
# SCENARIOS was given) on Debian 12's image, built here when its recipe changed (`SMOKE12=` leaves it out).
DEBIAN12_IMAGE := localhost/carme-node:debian12
DEBIAN12_SCENARIOS := containers slurm_external
SMOKE12 ?= $(if $(filter bookworm,$(CARME_RELEASE))$(filter command line,$(origin SCENARIOS)),,cluster)
molecule: $(PREPARE) ## every Molecule scenario, one after another (and the Debian 12 smoke set)
	scenario() {
	  echo "=== molecule scenario $$1 on $$2"
	  CARME_NODE_IMAGE=$$2 flock $(MOLECULE_LOCK) molecule test -s $$1
	}
	for s in $(filter-out $(DEBIAN12_SCENARIOS),$(SCENARIOS)); do scenario $$s $(CARME_NODE_IMAGE); done
	twelve="$(strip $(filter $(DEBIAN12_SCENARIOS),$(SCENARIOS)) $(SMOKE12))"
	[ -n "$$twelve" ] || exit 0
	[ "$(CARME_NODE_IMAGE)" = $(DEBIAN12_IMAGE) ] || $(MAKE) --no-print-directory debian12-parts
	for s in $$twelve; do scenario $$s $(DEBIAN12_IMAGE); done

# every benchmark on the demo (brought up first when it is not), bounded (under 45 min): bench/results/<date>.{json,md}
bench: venv
	carme demo status > /dev/null || $(MAKE) --no-print-directory demo
	$(PY) bench/run_all.py

clean:
	rm -rf .cache .artifacts .pytest_cache .mypy_cache .ruff_cache
