// Upstream's DRA end-to-end tests (k8s.io/kubernetes/test/e2e/dra) in a test binary of their own,
// built by `lab/build.sh --e2e` and run by `make e2e`. The whole of test/e2e would import every
// SIG's tests; this file is upstream's test/e2e/e2e_test.go and e2e.go reduced to what the DRA
// tests use: the framework's flags, its embedded manifests and ginkgo's runner. Upstream's suite
// set-up (waiting for kube-system Pods, deleting namespaces) is left out: the lab's nodes are ready
// when `make e2e` starts the run.
package e2e

import (
	"flag"
	"fmt"
	"os"
	"testing"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	"k8s.io/component-base/logs"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/test/e2e/framework"
	"k8s.io/kubernetes/test/e2e/framework/config"
	"k8s.io/kubernetes/test/e2e/framework/testfiles"
	e2etestingmanifests "k8s.io/kubernetes/test/e2e/testing-manifests"

	// The tests.
	_ "k8s.io/kubernetes/test/e2e/dra"

	// As upstream's e2e_test.go: the framework's optional parts and the logging flags.
	_ "k8s.io/component-base/logs/testinit"
	_ "k8s.io/kubernetes/test/e2e/framework/debug/init"
	_ "k8s.io/kubernetes/test/e2e/framework/node/init"
	_ "k8s.io/kubernetes/test/utils/ktesting/format"
)

func TestMain(m *testing.M) {
	config.CopyFlags(config.Flags, flag.CommandLine)
	framework.RegisterCommonFlags(flag.CommandLine)
	framework.RegisterClusterFlags(flag.CommandLine)
	flag.Parse()
	if flag.CommandLine.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "unknown additional command line arguments: %s\n", flag.CommandLine.Args())
		os.Exit(1)
	}
	testfiles.AddFileSource(e2etestingmanifests.GetE2ETestingManifestsFS())
	framework.AfterReadingAllFlags(&framework.TestContext)
	os.Exit(m.Run())
}

func TestE2E(t *testing.T) {
	logs.InitLogs()
	defer logs.FlushLogs()
	klog.EnableContextualLogging(true)
	gomega.RegisterFailHandler(framework.Fail)
	suiteConfig, reporterConfig := framework.CreateGinkgoConfig()
	ginkgo.RunSpecs(t, "Kubernetes DRA e2e suite", suiteConfig, reporterConfig)
}
