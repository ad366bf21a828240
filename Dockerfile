# propel-curriculum: the daemon and worker image. GPU hosts run the solver in the separate
# vllm/vllm-openai service (docker-compose.yml); this image talks to it over HTTP.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PROPEL_DATA_DIR=/var/lib/propel
RUN apt-get update \
    && apt-get install -y --no-install-recommends bubblewrap util-linux \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /app
# torch is pinned and installed first: the rest of the dependencies must not pull another build.
RUN pip install torch==2.13.0
COPY pyproject.toml README.md ./
COPY probes probes
COPY curriculum curriculum
COPY workers workers
COPY daemon daemon
COPY migrations migrations
COPY examples examples
RUN pip install . && useradd --system --create-home propel && mkdir -p /var/lib/propel \
    && chown propel /var/lib/propel
USER propel
VOLUME /var/lib/propel
EXPOSE 8787
HEALTHCHECK --interval=30s --timeout=10s --start-period=300s CMD ["propel", "check"]
ENTRYPOINT ["propel"]
CMD ["run"]
