// The prometheus-operator CustomResourceDefinitions (ServiceMonitor, PrometheusRule) that
// the chart's optional monitoring objects are checked against on the test control plane.
// Nothing is built from this module: `build` downloads it and copies two CRD files.
// Test infrastructure only.
module networkenforcer.test/control-plane/monitoring-crds

go 1.26.0

require github.com/prometheus-operator/prometheus-operator v0.85.0
