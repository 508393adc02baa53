# `mt serve` in a container (docs/serve.md, "In a container"), as LibreTranslate ships its own.
#
#   podman build -t mt-serve .                    # (docker build alike; podman: --format docker
#                                                 #  keeps the HEALTHCHECK)
#   podman run -p 5000:5000 -v ./my-model:/model:ro mt-serve
#
# Build arguments:
#   TORCH_INDEX  the index torch's wheel comes from: PyTorch's CPU one by default; a CUDA one
#                (https://download.pytorch.org/whl/cu128) for a GPU, passed to the container
#                by the engine (podman --device nvidia.com/gpu=all, docker --gpus all)
#   TORCH        the torch requirement (the one the Makefile installs)
#   EXTRAS       mt's extras: serve; serve,export to serve an `mt export` (CTranslate2) folder
#   MODEL        a folder of the build context baked in at /model: a run, a checkpoint or an
#                `mt export` folder (docker/model/, empty but for its README: mount one)
#   WHEELS       a folder of the build context holding every wheel mt needs: installed from it
#                alone, with no network (tests/serve/test_container.py builds so)
#   BASE         the image both stages start from: Debian's Python 3.11
#
# Every `mt serve` option is read from MT_SERVE_<OPTION> (MT_SERVE_API_KEYS, MT_SERVE_REQ_LIMIT
# ...: `podman run -e`); the model from MT_SERVE_CHECKPOINTS (/model). It runs as the user mt
# (uid 10001), listens on port 5000 (LibreTranslate's), and its HEALTHCHECK asks /health.
ARG BASE=python:3.11-slim-bookworm

FROM ${BASE} AS build
ARG TORCH=torch==2.13.0
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
ARG WHEELS=
ARG EXTRAS=serve
COPY . /src
RUN python3 -m venv /opt/mt \
 && if [ -n "$WHEELS" ]; then \
      /opt/mt/bin/pip install --no-cache-dir --no-index --find-links "/src/$WHEELS" \
        "$TORCH" "/src[$EXTRAS]"; \
    else \
      /opt/mt/bin/pip install --no-cache-dir --index-url "$TORCH_INDEX" "$TORCH" \
      && /opt/mt/bin/pip install --no-cache-dir "/src[$EXTRAS]"; \
    fi

FROM ${BASE}
ARG MODEL=docker/model
RUN useradd --system --uid 10001 --create-home --home-dir /home/mt mt
COPY --from=build /opt/mt /opt/mt
COPY --chown=mt:mt ${MODEL} /model
ENV PATH=/opt/mt/bin:$PATH \
    MT_SERVE_HOST=0.0.0.0 \
    MT_SERVE_PORT=5000 \
    MT_SERVE_CHECKPOINTS=/model
USER mt
WORKDIR /home/mt
EXPOSE 5000
# /health under the URL prefix, if one is set (MT_SERVE_URL_PREFIX: mt, /mt or /mt/)
HEALTHCHECK --interval=30s --timeout=5s --start-period=120s --retries=3 \
  CMD ["python3", "-c", "import os, urllib.request as u; p = os.environ.get('MT_SERVE_URL_PREFIX', '').strip('/'); u.urlopen('http://127.0.0.1:' + os.environ['MT_SERVE_PORT'] + ('/' + p if p else '') + '/health', timeout=4)"]
CMD ["mt", "serve"]
