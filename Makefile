# The two commands a new machine needs: `make run` and `make test` (see README.md).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip
CONSTRAINTS := constraints.txt
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: run test bench lint audit format install install-test install-bench migrate lock check-deploy messages clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

# Re-install only when the declared dependencies change. The `simulator` extra is the simulated
# SGLang worker's server (Starlette, uvicorn): not a runtime dependency of the product itself.
$(VENV)/.installed: pyproject.toml $(CONSTRAINTS) | $(BIN)/python
	$(PIP) install --quiet -c $(CONSTRAINTS) -e ".[simulator]"
	touch $@

$(VENV)/.installed-test: pyproject.toml $(CONSTRAINTS) | $(BIN)/python
	$(PIP) install --quiet -c $(CONSTRAINTS) -e ".[test,router,simulator,moderation]"
	touch $(VENV)/.installed $@

$(VENV)/.installed-bench: pyproject.toml $(CONSTRAINTS) | $(BIN)/python
	$(PIP) install --quiet -c $(CONSTRAINTS) -e ".[test,router,simulator,moderation,bench]"
	touch $(VENV)/.installed $(VENV)/.installed-test $@

install: $(VENV)/.installed
install-test: $(VENV)/.installed-test
install-bench: $(VENV)/.installed-bench

migrate: install
	$(BIN)/python manage.py migrate --noinput

## make run: the whole product on its embedded default (SQLite, in-process channels, simulated engine).
run: migrate
	@echo "Demo accounts:"
	@$(BIN)/python manage.py seed_demo_users
	HOST=$(HOST) PORT=$(PORT) $(BIN)/python scripts/run-embedded

## make test: install the test tools, make sure PostgreSQL and Redis answer, run the whole suite on them.
test: install-test
	scripts/ensure-test-deps
	scripts/ensure-services
	$(BIN)/python -m pytest $(PYTEST_ARGS)

## make bench: the web tier against the engine and its peers (smg, LiteLLM), and routing across simulated
## nodes (bench/routing.py, a phase of bench/run.py); not part of make test.
## Writes bench/results/ and docs/PERFORMANCE.md. BENCH_ARGS="--quick" for a short run.
## Run as a module from the checkout's root, which puts the root on sys.path: bench/ imports the process
## harness (harness/) shared with the tests, which is not part of the installed package.
bench: install-bench
	scripts/ensure-services
	$(BIN)/python -m bench.run $(BENCH_ARGS)

## make lint: ruff (lint and formatting), the import contracts (lint-imports: which package may import which,
## [tool.importlinter] in pyproject.toml; tests/test_layering.py runs them in make test too), bandit over the
## product's code, pip-audit over constraints.txt.
## Offline except pip-audit, which needs a vulnerability service (PyPI's JSON API or OSV). This machine and
## CI reach neither (only the package index), so there scripts/audit-deps prints in capitals that the
## dependencies were NOT audited and lets lint pass; `make audit` is the same audit failing instead (run it
## where the service answers). pip-audit alone would say "No known vulnerabilities found" there.
## Bandit's exceptions: [tool.bandit] in pyproject.toml and `# nosec <id>  # reason` on the line.
BANDIT_SCRIPTS := scripts/run-embedded scripts/vendor-js scripts/make-chat-icons scripts/audit-deps
lint: install-test
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports --no-cache
	$(BIN)/bandit -c pyproject.toml -q -r . $(BANDIT_SCRIPTS)
	$(BIN)/python scripts/audit-deps

audit: install-test
	$(BIN)/python scripts/audit-deps --require

format: install-test
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

## make check-deploy: Django's deployment checks on the production profile as a real deployment configures it,
## payments through Stripe included (placeholders: the checks read settings and call nobody). Development
## payments (PAYMENT_PROVIDER=dev) fail these checks, even for a declared demo (billing/checks.py).
check-deploy: install
	DJANGO_PROFILE=production SECRET_KEY=$$(openssl rand -hex 40) ALLOWED_HOSTS=chat.example.com \
	  DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres REDIS_URL=redis://127.0.0.1:6379/0 \
	  PAYMENT_PROVIDER=stripe STRIPE_SECRET_KEY=sk_live_placeholder STRIPE_WEBHOOK_SECRET=whsec_placeholder \
	  STRIPE_PRICE_PLUS=price_plus_placeholder STRIPE_PRICE_PRO=price_pro_placeholder \
	  $(BIN)/python manage.py check --deploy --fail-level WARNING

## make messages: after marking text for translation, bring every language's catalogue up to date with the code
## (locale/<lang>/LC_MESSAGES/django.po for pages and sentences, djangojs.po for the chat's scripts), then, once
## the new entries are translated, compile them (the .mo files are committed: `make run` needs no gettext).
## Needs GNU gettext (Debian: gettext). tests/test_translations.py fails on an entry left untranslated.
LOCALES := fr de es pt_BR it ja zh_Hans ar
MESSAGES_IGNORE := --ignore=.venv --ignore=node_modules --ignore=staticfiles --ignore=static/vendor --ignore=tests \
  --ignore=bench --ignore=harness --ignore=simulator --ignore=deploy --ignore=var
messages: install
	$(BIN)/python manage.py makemessages --no-obsolete $(MESSAGES_IGNORE) $(addprefix -l ,$(LOCALES))
	$(BIN)/python manage.py makemessages --no-obsolete -d djangojs $(MESSAGES_IGNORE) $(addprefix -l ,$(LOCALES))
	$(BIN)/python manage.py compilemessages --ignore=.venv

## make lock: refresh constraints.txt from a clean resolve of every extra except gpu.
lock:
	rm -rf .venv-lock && $(PYTHON) -m venv .venv-lock
	.venv-lock/bin/pip install --quiet -e ".[test,router,simulator,moderation,bench]"
	.venv-lock/bin/pip freeze --exclude-editable | grep -v '^-e' > $(CONSTRAINTS)
	rm -rf .venv-lock

clean:
	rm -rf $(VENV) var staticfiles .pytest_cache .ruff_cache .import_linter_cache .grimp_cache
