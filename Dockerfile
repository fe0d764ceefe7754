# One image for web, worker and beat; docker-compose.yml picks the command.
FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PERFWEB_DATA_DIR=/data
WORKDIR /app
COPY pyproject.toml README.md ./
# each folder holds its package under the import name (agent/perfweb_agent/, ...)
COPY contract ./contract
COPY agent ./agent
COPY recommender ./recommender
COPY perfweb ./perfweb
COPY manage.py ./
RUN pip install --no-cache-dir '.[server]' && python manage.py collectstatic --no-input -v 0
VOLUME /data
EXPOSE 8000
CMD ["gunicorn", "perfweb.wsgi", "--bind", "0.0.0.0:8000", "--workers", "4", "--threads", "4"]
