# One image for every dormant process: worker, beat, `db upgrade`, the console, Flower.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1

WORKDIR /app
COPY pyproject.toml README.md ./
# The one door (dormant/__init__.py); pyproject.toml maps the four folders under it.
COPY dormant/__init__.py dormant/py.typed ./dormant/
COPY engine_core ./engine_core
COPY persistence ./persistence
COPY scheduler ./scheduler
COPY tasks ./tasks
RUN pip install . && useradd --create-home --uid 10001 dormant
USER dormant
WORKDIR /home/dormant

# Overridden per service in compose.yaml.
CMD ["dormant", "worker"]
