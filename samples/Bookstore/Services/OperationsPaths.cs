namespace Bookstore.Services;

/// <summary>
/// What a container platform reaches on every service (<c>ComponentHost</c> maps them; <c>k8s/</c> probes and scrape
/// annotations name them; <c>test/PersistentServices.Kubernetes.Tests</c> compiles this file to check the manifests
/// against it).
/// </summary>
internal static class OperationsPaths
{
    /// <summary>Liveness: the library's check tagged <c>live</c>, unhealthy only when the log faulted or recovery failed (a restart is the cure).</summary>
    public const string Live = "/health/live";

    /// <summary>Readiness: the library's check tagged <c>ready</c>, healthy once the log is open and scanned, unhealthy while draining.</summary>
    public const string Ready = "/health/ready";

    /// <summary>The library's meter (<c>PersistentServices</c>) and ASP.NET Core's request metrics in Prometheus' text format.</summary>
    public const string Metrics = "/metrics";
}
