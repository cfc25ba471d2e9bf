#!/usr/bin/env bash
# Upload a model repository to Vertex AI served by inferd's image (deploy/vertex-ai/Dockerfile) and deploy it
# to an endpoint. Needs gcloud, logged in, with a project, a region, a bucket and an Artifact Registry
# repository:
#   deploy/vertex-ai/upload.sh PROJECT REGION gs://BUCKET/models REGION-docker.pkg.dev/PROJECT/REPO/inferd-vertex:0.1.0
# The bucket path holds a Triton model repository (one folder per model). Vertex AI copies it and gives
# its copy to the container as AIP_STORAGE_URI; the predict route serves the repository's only model
# (several: set DEFAULT_MODEL). Requests then go through Vertex AI's rawPredict, KServe v2 bodies as they are:
#   curl -X POST -H "Authorization: Bearer $(gcloud auth print-access-token)" -H "Content-Type: application/json" \
#     https://REGION-aiplatform.googleapis.com/v1/projects/PROJECT/locations/REGION/endpoints/ENDPOINT:rawPredict \
#     -d '{"inputs":[{"name":"INPUT0","shape":[1,16],"datatype":"FP32","data":[...]}]}'
set -euo pipefail
project=$1 region=$2 artifacts=$3 image=$4
name=${NAME:-inferd-model}
args=()
if [ -n "${DEFAULT_MODEL:-}" ]; then args+=("--container-args=serve,--vertex-ai-default-model=${DEFAULT_MODEL}"); fi
gcloud ai models upload --project="$project" --region="$region" --display-name="$name" \
  --container-image-uri="$image" --artifact-uri="$artifacts" \
  --container-ports=8080 --container-health-route=/v2/health/ready --container-predict-route=/predict \
  "${args[@]}"
model=$(gcloud ai models list --project="$project" --region="$region" --filter="display_name=$name" \
  --format="value(name)" | head -1)
endpoint=$(gcloud ai endpoints create --project="$project" --region="$region" --display-name="$name" \
  --format="value(name)")
gcloud ai endpoints deploy-model "$endpoint" --project="$project" --region="$region" --model="$model" \
  --display-name="$name" --machine-type="${MACHINE_TYPE:-n1-standard-4}"
echo "endpoint: $endpoint"
