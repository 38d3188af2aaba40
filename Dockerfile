# The equivalent of the image `python3 image/build.py` assembles without a container engine
# (Debian bookworm, Python 3.11, the project in a venv at /opt/dmn, default user dmn
# 65532:65532). For users who have an engine:
#
#   docker build -t dra-multi-network:0.1.0 .
#
# The engine-free build pins the runtime dependencies to the versions the development venv
# resolved; here pip resolves them from pyproject.toml at build time. Both install the
# product-only wheel (DMN_WHEEL=product, see setup.py): no lab, no lab extra.
FROM debian:bookworm-slim AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv \
 && rm -rf /var/lib/apt/lists/*
RUN python3 -m venv /opt/dmn
COPY . /src
RUN DMN_WHEEL=product /opt/dmn/bin/pip install --no-cache-dir --only-binary=:all: /src

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 libudev1 ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --gid 65532 dmn \
 && useradd --uid 65532 --gid 65532 --home-dir /nonexistent --shell /usr/sbin/nologin dmn
COPY --from=build /opt/dmn /opt/dmn
ENV PATH=/opt/dmn/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONUNBUFFERED=1
USER 65532:65532
ENTRYPOINT ["/opt/dmn/bin/dmn"]
CMD ["--help"]
