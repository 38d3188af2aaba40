// Command cainjector runs cert-manager's own CA injection reconcilers (the cainjector
// package of its root module, at the pinned version) for the lab: cert-manager's command
// module (cmd/cainjector) is not served by the module proxy here. It registers the
// reconcilers for validating and mutating webhook configurations, with Certificates as a CA
// source (the cert-manager.io/inject-ca-from annotation), on a controller-runtime manager
// and runs it, with cert-manager's user agent (its field manager) and Secrets read uncached;
// no leader election, no metrics or health servers.
package main

import (
	"context"
	"flag"
	"os"
	"os/signal"
	"syscall"

	corev1 "k8s.io/api/core/v1"
	apiext "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	apireg "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/cert-manager/cert-manager/pkg/controller/cainjector"
	logf "github.com/cert-manager/cert-manager/pkg/logs"
	"github.com/cert-manager/cert-manager/pkg/util"
)

func main() {
	// controller-runtime claims --kubeconfig on the global flag set, so this command
	// parses its own.
	flags := flag.NewFlagSet("cainjector", flag.ExitOnError)
	kubeconfig := flags.String("kubeconfig", "", "kubeconfig of the API server")
	_ = flags.Parse(os.Args[1:])
	logf.InitLogs()
	ctrl.SetLogger(logf.Log)
	log := logf.Log.WithName("cainjector")

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	config, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fail(log.Error, err, "loading the kubeconfig")
	}
	// cainjector applies its CA bundles server-side under a field manager named after the
	// user agent, so the config must carry cert-manager's own agent string.
	config = util.RestConfigWithUserAgent(config, "cainjector")
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		clientgoscheme.AddToScheme, apiext.AddToScheme, apireg.AddToScheme, cmapi.AddToScheme,
	} {
		if err := add(scheme); err != nil {
			fail(log.Error, err, "building the scheme")
		}
	}
	manager, err := ctrl.NewManager(config, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		// The injectors watch Secrets' metadata only and read the one Secret they need
		// straight from the API server, as cert-manager's own cainjector does.
		Client: client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}}}},
	})
	if err != nil {
		fail(log.Error, err, "creating the manager")
	}
	err = cainjector.RegisterAllInjectors(ctx, manager, cainjector.SetupOptions{
		EnableCertificatesDataSource: true,
		EnabledReconcilersFor: map[string]bool{
			cainjector.ValidatingWebhookConfigurationName: true,
			cainjector.MutatingWebhookConfigurationName:   true,
		},
	})
	if err != nil {
		fail(log.Error, err, "registering the injectors")
	}
	log.Info("starting")
	if err := manager.Start(ctx); err != nil {
		fail(log.Error, err, "running the manager")
	}
}

func fail(logError func(error, string, ...any), err error, what string) {
	logError(err, what)
	os.Exit(1)
}
