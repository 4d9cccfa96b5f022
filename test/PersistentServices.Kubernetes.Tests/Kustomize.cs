using System.Diagnostics;
using System.Reflection;

namespace PersistentServices.Kubernetes.Tests;

/// <summary>
/// <c>kubectl kustomize DIR</c>: what <c>kubectl apply -k DIR</c> would send to a cluster. The kustomizations use only the
/// fields that the kustomize inside Debian's kubectl 1.20 (package kubernetes-client, which .ci/run installs when kubectl
/// is missing) reads, so any kubectl from 1.20 on renders them. Without kubectl the tests that need it are skipped,
/// except in CI (<c>CI</c> set), where that is a failure.
/// </summary>
internal static class Kustomize
{
    public static string RepositoryRoot { get; } = Path.GetFullPath(typeof(Kustomize).Assembly.GetCustomAttributes<AssemblyMetadataAttribute>()
        .Single(a => a.Key == "RepositoryRoot").Value!);

    /// <summary>A path inside the repository.</summary>
    public static string InRepository(string relative) => Path.Combine(RepositoryRoot, relative);

    public static async Task<string> BuildAsync(string directory)
    {
        var kubectl = FindKubectl();
        if (kubectl is null)
        {
            const string Missing = "kubectl is not installed (Debian: apt-get install kubernetes-client); the manifests were not rendered";
            Assert.True(Environment.GetEnvironmentVariable("CI") is not { Length: > 0 }, Missing);
            Assert.Skip(Missing);
        }

        var start = new ProcessStartInfo(kubectl) { RedirectStandardOutput = true, RedirectStandardError = true, UseShellExecute = false };
        start.ArgumentList.Add("kustomize");
        start.ArgumentList.Add(directory);
        using var process = Process.Start(start)!;
        var output = process.StandardOutput.ReadToEndAsync(TestContext.Current.CancellationToken);
        var errors = process.StandardError.ReadToEndAsync(TestContext.Current.CancellationToken);
        await process.WaitForExitAsync(TestContext.Current.CancellationToken);
        Assert.True(process.ExitCode == 0, $"kubectl kustomize {directory} exited with {process.ExitCode}: {await errors}");
        return await output;
    }

    private static string? FindKubectl()
        => (Environment.GetEnvironmentVariable("PATH") ?? "").Split(Path.PathSeparator, StringSplitOptions.RemoveEmptyEntries)
            .Select(dir => Path.Combine(dir, "kubectl"))
            .FirstOrDefault(File.Exists);
}
