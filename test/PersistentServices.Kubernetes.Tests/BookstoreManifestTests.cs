using k8s.Models;

namespace PersistentServices.Kubernetes.Tests;

/// <summary>
/// The bookstore's overlays as <c>kubectl kustomize</c> renders them: every object read strictly into its API type, and
/// every deployment rule of <see cref="ManifestChecker"/> kept.
/// </summary>
public sealed class BookstoreManifestTests
{
    [Theory]
    [InlineData("local")]
    [InlineData("production")]
    public async Task Overlay_ParsesStrictly_AndKeepsEveryRule(string overlay)
    {
        var objects = StrictManifestReader.Read(await Kustomize.BuildAsync(Kustomize.InRepository($"{Bookstore.Overlays}/{overlay}")));

        var violations = Bookstore.Checker.Check(objects);

        Assert.True(violations.Count == 0, string.Join(Environment.NewLine, violations));
        Assert.Equal(
            ["ConfigMap bookstore", "Deployment gateway", "Deployment taxcalculator", "Namespace bookstore",
             "PodDisruptionBudget bookseller", "PodDisruptionBudget gateway", "PodDisruptionBudget pricegrabber", "PodDisruptionBudget store", "PodDisruptionBudget taxcalculator",
             "Service bookseller", "Service gateway", "Service pricegrabber", "Service store", "Service taxcalculator",
             "StatefulSet bookseller", "StatefulSet pricegrabber", "StatefulSet store"],
            objects.Select(o => $"{o.Kind} {o.Name()}").Order(StringComparer.Ordinal));
    }

    [Theory]
    [InlineData("local")]
    [InlineData("production")]
    public async Task Services_BelieveTheGatewaysForwardedAddresses_FromThePodNetwork(string overlay)
    {
        // The gateway's pods are not on loopback: without a trusted network every client behind the gateway would share one
        // MaxSessionsPerAddress share (docs/gateway.md, "Client addresses").
        var objects = StrictManifestReader.Read(await Kustomize.BuildAsync(Kustomize.InRepository($"{Bookstore.Overlays}/{overlay}")));
        var map = objects.OfType<V1ConfigMap>().Single(m => m.Name() == "bookstore");

        Assert.True(map.Data.TryGetValue("Bookstore__TrustedProxyNetworks", out var networks));
        Assert.All(networks.Split(','), entry => Assert.True(System.Net.IPNetwork.TryParse(entry.Trim(), out var network) && network.PrefixLength > 0, entry));
        var services = objects.OfType<V1StatefulSet>().Select(s => s.Spec.Template).Concat(objects.OfType<V1Deployment>().Where(d => d.Name() != "gateway").Select(d => d.Spec.Template))
            .SelectMany(t => t.Spec.Containers).ToList();
        Assert.Equal(4, services.Count);
        Assert.All(services, c => Assert.Contains(c.EnvFrom ?? [], source => source.ConfigMapRef?.Name == "bookstore"));
    }

    [Fact]
    public async Task LocalOverlay_RunsTheLoadedImage_AndNeverPullsIt()
    {
        var objects = StrictManifestReader.Read(await Kustomize.BuildAsync(Kustomize.InRepository($"{Bookstore.Overlays}/local")));

        var containers = objects.OfType<V1StatefulSet>().Select(s => s.Spec.Template).Concat(objects.OfType<V1Deployment>().Select(d => d.Spec.Template))
            .SelectMany(t => t.Spec.Containers).ToList();

        Assert.Equal(5, containers.Count);
        Assert.All(containers, c => Assert.Equal(("localhost/bookstore:dev", "Never"), (c.Image, c.ImagePullPolicy)));
    }

    [Fact]
    public void LogWorstCase_IsTheDocumentedFigure()
    {
        // The base's ConfigMap: 6 x 16 MiB + 16 MiB + 8 MiB (docs/operations.md, "Sizing the log volume"); production's
        // 64 MiB segments and periods: 456 MiB; the library's defaults (1 GiB segments): 1,416 MiB.
        Assert.Equal(120L << 20, ManifestChecker.LogWorstCaseBytes(4, 16L << 20, 24, 4 << 20));
        Assert.Equal(456L << 20, ManifestChecker.LogWorstCaseBytes(4, 64L << 20, 26, 4 << 20));
        var defaults = Bookstore.Contract.Defaults;
        Assert.Equal(1416L << 20, ManifestChecker.LogWorstCaseBytes(defaults.IdleCheckpointAfter, defaults.ServiceCheckpointLogBytes, defaults.Log.SegmentSizeBits, defaults.Log.ZeroFillBytes));
    }
}
