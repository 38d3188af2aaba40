// Command controller runs cert-manager's own certificate controllers (the packages of its
// root module, at the pinned version) for the lab. cert-manager's command module
// (cmd/controller) is not served by the module proxy here, so this program only does what
// that command's start-up does for the controllers the chart's objects need: build the
// controller context factory, construct each registered controller by name, start the
// shared informers and run the control loops. It has no leader election (the lab runs one
// copy), no metrics server and none of the ACME, Vault or Venafi issuers.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/cert-manager/cert-manager/pkg/controller"
	"github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/approver"
	crca "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/ca"
	crselfsigned "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/selfsigned"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/issuing"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/keymanager"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/readiness"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/requestmanager"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/revisionmanager"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/trigger"
	"github.com/cert-manager/cert-manager/pkg/controller/clusterissuers"
	"github.com/cert-manager/cert-manager/pkg/controller/issuers"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/ca"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/selfsigned"
	logf "github.com/cert-manager/cert-manager/pkg/logs"
)

// enabled are the controllers a CA chain of Issuers and Certificates needs.
var enabled = []string{
	issuing.ControllerName,
	keymanager.ControllerName,
	requestmanager.ControllerName,
	readiness.ControllerName,
	trigger.ControllerName,
	revisionmanager.ControllerName,
	approver.ControllerName,
	crca.CRControllerName,
	crselfsigned.CRControllerName,
	issuers.ControllerName,
	clusterissuers.ControllerName,
}

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the API server")
	clusterNamespace := flag.String("cluster-resource-namespace", "cert-manager",
		"namespace of the Secrets ClusterIssuers refer to")
	flag.Parse()
	logf.InitLogs()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	ctx = logf.NewContext(ctx, logf.Log, "controller")
	log := logf.FromContext(ctx)

	opts := controller.ContextOptions{
		Kubeconfig:         *kubeconfig,
		KubernetesAPIQPS:   20,
		KubernetesAPIBurst: 50,
		IssuerOptions: controller.IssuerOptions{
			ClusterResourceNamespace: *clusterNamespace,
		},
		CertificateOptions: controller.CertificateOptions{
			CertificateRequestMinimumBackoffDuration: time.Hour,
			CertificateRequestMaximumBackoffDuration: 32 * time.Hour,
		},
	}
	factory, err := controller.NewContextFactory(ctx, opts)
	if err != nil {
		fail(log.Error, err, "building the controller context")
	}
	known := controller.Known()
	var loops sync.WaitGroup
	for _, name := range enabled {
		construct, ok := known[name]
		if !ok {
			fail(log.Error, fmt.Errorf("controller %q is not registered", name), "enabling")
		}
		loop, err := construct(factory)
		if err != nil {
			fail(log.Error, err, "constructing controller "+name)
		}
		loops.Add(1)
		go func(name string, loop controller.Interface) {
			defer loops.Done()
			log.Info("starting controller", "controller", name)
			if err := loop.Run(5, ctx); err != nil {
				fail(log.Error, err, "running controller "+name)
			}
		}(name, loop)
	}
	shared, err := factory.Build()
	if err != nil {
		fail(log.Error, err, "building the informers' context")
	}
	shared.SharedInformerFactory.Start(ctx.Done())
	shared.KubeSharedInformerFactory.Start(ctx.Done())
	shared.HTTP01ResourceMetadataInformersFactory.Start(ctx.Done())
	if shared.GatewaySolverEnabled {
		shared.GWShared.Start(ctx.Done())
	}
	log.Info("controllers started", "count", len(enabled))
	loops.Wait()
}

func fail(logError func(error, string, ...any), err error, what string) {
	logError(err, what)
	os.Exit(1)
}
