from tests.kubeapi.fixtures import kube_api, kube_client  # noqa: F401
