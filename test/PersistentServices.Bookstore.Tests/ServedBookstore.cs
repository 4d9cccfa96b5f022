using System.Diagnostics;
using System.Globalization;
using System.Net;
using System.Reflection;
using System.Text.Json;

namespace PersistentServices.Bookstore.Tests;

/// <summary>
/// The bookstore's six services started one by one with <c>Bookstore serve &lt;component&gt;</c>, as a container platform
/// starts them (no launcher, no supervisor), each on its own loopback port with its own log directory; the test kills
/// and restarts them itself. Stores are named <c>store-0</c> … like the Kubernetes StatefulSet's pods.
/// </summary>
internal sealed class ServedBookstore : IAsyncDisposable
{
    private static readonly string BookstorePath = typeof(ServedBookstore).Assembly.GetCustomAttributes<AssemblyMetadataAttribute>()
        .Single(a => a.Key == "BookstorePath").Value!;

    private readonly string _root = Path.Combine(Path.GetTempPath(), "ps-served-bookstore-" + Guid.NewGuid().ToString("N")[..8]);
    private readonly Dictionary<string, (string Component, int Port)> _services = new(StringComparer.Ordinal);
    private readonly Dictionary<string, Process> _processes = new(StringComparer.Ordinal);
    private readonly Dictionary<string, string> _environment;

    private ServedBookstore(int stores)
    {
        var ports = TestSupport.LoopbackPorts.Free(stores + 3);
        for (var i = 0; i < stores; i++)
        {
            _services[$"store-{i.ToString(CultureInfo.InvariantCulture)}"] = ("store", ports[i]);
        }

        _services["pricegrabber"] = ("pricegrabber", ports[stores]);
        _services["taxcalculator"] = ("tax", ports[stores + 1]);
        _services["bookseller"] = ("seller", ports[stores + 2]);
        _environment = new Dictionary<string, string>(StringComparer.Ordinal)
        {
            ["PersistentServices__Calls__PeerKey"] = "served-bookstore-test-peer-key-" + Guid.NewGuid().ToString("N"),
            ["Bookstore__Stores"] = string.Join(';', Stores.Select(s => $"{s}={Url(s)}")),
            ["Bookstore__TaxUrl"] = Url("taxcalculator").ToString(),
            ["DOTNET_NOLOGO"] = "1",
        };
    }

    public IEnumerable<string> Stores => _services.Keys.Where(s => s.StartsWith("store-", StringComparison.Ordinal));

    /// <summary>The buyer command's arguments for this deployment: one <c>--base-url NAME=URL</c> per service it talks to.</summary>
    public IReadOnlyList<string> BaseUrls
        => [.. new[] { "pricegrabber", "bookseller" }.Concat(Stores).SelectMany(s => new[] { "--base-url", $"{s}={Url(s)}" })];

    public static async Task<ServedBookstore> StartAsync(int stores = 3)
    {
        var bookstore = new ServedBookstore(stores);
        await Task.WhenAll(bookstore._services.Keys.Select(bookstore.StartAsync));
        return bookstore;
    }

    public Uri Url(string service) => new($"http://127.0.0.1:{_services[service].Port.ToString(CultureInfo.InvariantCulture)}");

    /// <summary>Starts <paramref name="service"/> (again) on its port and log directory; returns once <c>/health/ready</c> answers 200.</summary>
    public async Task StartAsync(string service)
    {
        var (component, port) = _services[service];
        var directory = Path.Combine(_root, service);
        Directory.CreateDirectory(directory);
        var start = new ProcessStartInfo("dotnet") { UseShellExecute = false, RedirectStandardOutput = true, RedirectStandardError = true };
        start.ArgumentList.Add(BookstorePath);
        start.ArgumentList.Add("serve");
        start.ArgumentList.Add(component);
        foreach (var (key, value) in _environment)
        {
            start.Environment[key] = value;
        }

        start.Environment["PersistentServices__ServiceName"] = service;
        start.Environment["PersistentServices__LogDirectory"] = Path.Combine(directory, "log");
        start.Environment["ASPNETCORE_URLS"] = Url(service).ToString();
        var process = Process.Start(start)!;
        process.OutputDataReceived += (_, _) => { };
        process.ErrorDataReceived += (_, _) => { };
        process.BeginOutputReadLine();
        process.BeginErrorReadLine();
        lock (_processes)
        {
            _processes[service] = process;
        }

        using var http = new HttpClient { Timeout = TimeSpan.FromSeconds(2) };
        var clock = Stopwatch.StartNew();
        while (true)
        {
            Assert.False(process.HasExited, $"{service} exited with {(process.HasExited ? process.ExitCode : 0)} before it was ready");
            Assert.True(clock.Elapsed < TimeSpan.FromMinutes(1), $"{service} was not ready within a minute");
            try
            {
                using var response = await http.GetAsync(new Uri(Url(service), "/health/ready"), TestContext.Current.CancellationToken);
                if (response.StatusCode == HttpStatusCode.OK)
                {
                    return;
                }
            }
            catch (Exception ex) when (ex is HttpRequestException or TaskCanceledException)
            {
            }

            await Task.Delay(100, TestContext.Current.CancellationToken);
        }
    }

    /// <summary>Waits until <paramref name="store"/>'s execution ledger counts at least <paramref name="executions"/> reserve and release calls.</summary>
    public async Task WaitForExecutionsAsync(string store, long executions)
    {
        using var http = new HttpClient { Timeout = TimeSpan.FromSeconds(5) };
        var clock = Stopwatch.StartNew();
        while (true)
        {
            using var inventory = JsonDocument.Parse(await http.GetStringAsync(new Uri(Url(store), "/inventory"), TestContext.Current.CancellationToken));
            if (inventory.RootElement.GetProperty("ledger").GetProperty("executions").GetInt64() >= executions)
            {
                return;
            }

            Assert.True(clock.Elapsed < TimeSpan.FromMinutes(1), $"{store} did not execute {executions} calls within a minute");
            await Task.Delay(100, TestContext.Current.CancellationToken);
        }
    }

    /// <summary>SIGKILL: nothing of the service's shutdown runs.</summary>
    public async Task KillAsync(string service)
    {
        Process process;
        lock (_processes)
        {
            process = _processes[service];
        }

        process.Kill();
        await process.WaitForExitAsync(TestContext.Current.CancellationToken);
    }

    /// <summary>Deletes a stopped service's log (a lost volume: only to show that the reconciliation notices).</summary>
    public void DeleteLog(string service) => Directory.Delete(Path.Combine(_root, service, "log"), recursive: true);

    public async ValueTask DisposeAsync()
    {
        List<Process> processes;
        lock (_processes)
        {
            processes = [.. _processes.Values];
        }

        foreach (var process in processes.Where(p => !p.HasExited))
        {
            process.Kill();
        }

        foreach (var process in processes)
        {
            await process.WaitForExitAsync(CancellationToken.None);
            process.Dispose();
        }

        Directory.Delete(_root, recursive: true);
    }
}
