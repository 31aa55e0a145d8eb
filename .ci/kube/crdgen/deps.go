//go:build tools

// Package crdgen pins controller-gen and the Gateway API types it reads:
// .ci/kube.sh generates the Gateway and HTTPRoute CRDs from the Go types of
// sigs.k8s.io/gateway-api (the module proxy's v1.6.3) instead of copying the
// project's YAML, and .ci/kube's API server serves them.
package crdgen

import _ "sigs.k8s.io/gateway-api/apis/v1"
