using System.Globalization;
using System.Text.RegularExpressions;
using Bookstore.Services;

namespace PersistentServices.Kubernetes.Tests;

/// <summary>The bookstore sample as the manifests must see it: its paths, its image's port, the library's defaults.</summary>
internal static partial class Bookstore
{
    public const string Overlays = "samples/Bookstore/k8s/overlays";

    public static AppContract Contract { get; } = new(
        OperationsPaths.Live,
        OperationsPaths.Ready,
        OperationsPaths.Metrics,
        ImagePort(),
        new PersistentServicesOptions());

    public static ManifestChecker Checker { get; } = new(Contract);

    /// <summary>The port the Containerfile's <c>ASPNETCORE_HTTP_PORTS</c> gives the image.</summary>
    private static int ImagePort()
    {
        var containerfile = File.ReadAllText(Kustomize.InRepository("samples/Bookstore/container/Containerfile"));
        var match = HttpPorts().Match(containerfile);
        Assert.True(match.Success, "the Containerfile sets no ASPNETCORE_HTTP_PORTS");
        return int.Parse(match.Groups["port"].Value, CultureInfo.InvariantCulture);
    }

    [GeneratedRegex(@"ASPNETCORE_HTTP_PORTS=(?<port>\d+)")]
    private static partial Regex HttpPorts();
}
