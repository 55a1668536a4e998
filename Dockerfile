# walcast daemon image: `docker run walcast run --config /etc/walcast.toml`
# (or `tail` for a quick look). Build: docker build -t walcast .
FROM python:3.11-slim

RUN useradd --system --create-home --uid 10001 walcast
WORKDIR /app
COPY pyproject.toml README.md ./
COPY capture ./capture
COPY pipeline ./pipeline
COPY schemas ./schemas
RUN pip install --no-cache-dir .

USER walcast
ENV PYTHONUNBUFFERED=1
ENTRYPOINT ["walcast"]
CMD ["--help"]
