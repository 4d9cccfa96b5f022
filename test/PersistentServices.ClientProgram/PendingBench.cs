using System.Diagnostics;
using System.Globalization;
using System.Net;
using System.Net.Sockets;
using System.Text;
using Microsoft.Extensions.DependencyInjection;
using PersistentServices.Client;

/// <summary>
/// The exactly-once client's memory and disk per pending request (docs/benchmarks.md, issue 11). <c>PS_BENCH=pending:N:B</c>
/// starts N concurrent calls with B-byte bodies against a service that opens sessions and never answers a request; once the
/// service has received all N (each was stored and forced first) it prints the managed heap and the store's size per
/// pending request, then cancels. The service is a child process (<c>PS_BENCH=hold:K</c>, K ports) so that its sockets and
/// buffers are not counted in the client's heap; with at most 1,000 sessions per service (the option allows 1,024), N
/// calls go to ceil(N/1000) ports.
/// </summary>
internal static class PendingBench
{
    private const int SessionsPerService = 1000;

    public static async Task RunAsync(string spec, string store)
    {
        var parts = spec.Split(':');
        var plain = parts[0] == "pending-plain"; // the same calls through a plain HttpClient: what HTTP alone holds per call
        var count = int.Parse(parts[1], CultureInfo.InvariantCulture);
        var bodyBytes = int.Parse(parts[2], CultureInfo.InvariantCulture);
        if (Directory.Exists(store) && Directory.EnumerateFileSystemEntries(store).Any())
        {
            throw new InvalidOperationException($"PS_CLIENT_STORE {store} is not empty: pending requests read back would be counted.");
        }

        var services = (count + SessionsPerService - 1) / SessionsPerService;
        using var server = StartHoldServer(services);
        var ports = (await server.StandardOutput.ReadLineAsync())!["ports ".Length..].Split(',').Select(p => int.Parse(p, CultureInfo.InvariantCulture)).ToArray();
        var received = 0;
        var reader = Task.Run(async () =>
        {
            while (await server.StandardOutput.ReadLineAsync() is { } line)
            {
                Volatile.Write(ref received, int.Parse(line["received ".Length..], CultureInfo.InvariantCulture));
            }
        });

        var collection = new ServiceCollection();
        var client = collection.AddHttpClient("svc", http => http.Timeout = Timeout.InfiniteTimeSpan);
        if (!plain)
        {
            client.AddPersistentSessions(options =>
            {
                options.StoreDirectory = store;
                options.MaxSessionsPerService = Math.Min(count, SessionsPerService);
                options.AttemptTimeout = TimeSpan.FromMinutes(30); // no retry while the calls are held
                options.CloseSessionsTimeout = TimeSpan.Zero;
            });
        }

        await using var provider = collection.BuildServiceProvider();
        var factory = provider.GetRequiredService<IHttpClientFactory>();
        var persistent = plain ? null : provider.GetRequiredKeyedService<PersistentSessionClient>("svc");
        async Task<int> PendingAsync() => persistent is null ? count : await persistent.CountPendingAsync();
        await PendingAsync(); // opens the store (its in-memory log pages are part of the baseline)
        using var http = factory.CreateClient("svc");

        var before = GC.GetTotalMemory(forceFullCollection: true);
        var heapBefore = GC.GetGCMemoryInfo(GCKind.FullBlocking).HeapSizeBytes;
        var workingSetBefore = Environment.WorkingSet;
        var started = Stopwatch.StartNew();
        using var cancel = new CancellationTokenSource();
        var calls = new Task[count];
        for (var i = 0; i < count; i++)
        {
            // The application's own request: a body of its own per call (counted: the client keeps the message while it is pending).
            var body = new byte[bodyBytes];
            body.AsSpan().Fill((byte)'x');
            Encoding.ASCII.GetBytes($"{{\"account\":\"a{i}\",\"amount\":1,\"pad\":\"").CopyTo(body, 0);
            body[^2] = (byte)'"';
            body[^1] = (byte)'}';
            var request = new HttpRequestMessage(HttpMethod.Post, $"http://127.0.0.1:{ports[i % services]}/deposit") { Content = new ByteArrayContent(body) };
            calls[i] = http.SendAsync(request, cancel.Token);
        }

        while (Volatile.Read(ref received) < count || await PendingAsync() < count)
        {
            if (started.Elapsed > TimeSpan.FromMinutes(10) || calls.FirstOrDefault(c => c.IsFaulted) is { } failed)
            {
                throw new InvalidOperationException($"Not every request reached the service: {Volatile.Read(ref received)} of {count}.", calls.FirstOrDefault(c => c.IsFaulted)?.Exception);
            }

            await Task.Delay(100);
        }

        var held = started.Elapsed;
        var after = GC.GetTotalMemory(forceFullCollection: true);
        var heapAfter = GC.GetGCMemoryInfo(GCKind.FullBlocking).HeapSizeBytes;
        var workingSetAfter = Environment.WorkingSet;
        var storeBytes = plain ? 0 : new DirectoryInfo(store).EnumerateFiles("*", SearchOption.AllDirectories).Sum(f => f.Length);
        Console.WriteLine(string.Create(CultureInfo.InvariantCulture,
            $"{parts[0]}={count} body={bodyBytes}B services={services} all-held-after={held.TotalSeconds:F1}s " +
            $"managed={(after - before) / (double)count:F0}B/req (GetTotalMemory {before}->{after}) " +
            $"heap={(heapAfter - heapBefore) / (double)count:F0}B/req (HeapSizeBytes {heapBefore}->{heapAfter}) " +
            $"working-set={(workingSetAfter - workingSetBefore) / (double)count:F0}B/req " +
            $"store-files={storeBytes}B ({storeBytes / (double)count:F0}B/req)"));

        Console.Out.Flush();
        if (Environment.GetEnvironmentVariable("PS_PENDING_PAUSE") is { } pause)
        {
            await Task.Delay(TimeSpan.FromSeconds(int.Parse(pause, CultureInfo.InvariantCulture))); // time to inspect the process (a heap histogram)
        }

        await cancel.CancelAsync();
        try
        {
            await Task.WhenAll(calls);
        }
        catch (OperationCanceledException)
        {
        }

        server.Kill();
        await server.WaitForExitAsync();
        await reader;
    }

    private static Process StartHoldServer(int ports)
    {
        // This program again, as `dotnet <dll>` or through its apphost.
        var self = Environment.ProcessPath!;
        var info = new ProcessStartInfo(self) { RedirectStandardOutput = true, RedirectStandardInput = true, UseShellExecute = false };
        if (Path.GetFileNameWithoutExtension(self) == "dotnet")
        {
            info.ArgumentList.Add(typeof(PendingBench).Assembly.Location);
        }

        info.Environment["PS_BENCH"] = $"hold:{ports}";
        return Process.Start(info)!;
    }

    /// <summary>
    /// The never-answering service: on each of <paramref name="spec"/>'s K ports (127.0.0.1), answers <c>POST /ps/sessions</c>
    /// with a new session and reads every other request without answering it. Prints "ports p1,..." and then "received n"
    /// whenever the count of held requests changed.
    /// </summary>
    public static async Task HoldAsync(string spec)
    {
        var listeners = Enumerable.Range(0, int.Parse(spec.Split(':')[1], CultureInfo.InvariantCulture))
            .Select(_ => new TcpListener(IPAddress.Loopback, 0)).ToList();
        foreach (var listener in listeners)
        {
            listener.Start(backlog: 4096);
        }

        // Its standard input is a pipe from the measuring process: when that one ends (even killed), so does this one.
        _ = Task.Run(async () =>
        {
            while (await Console.In.ReadLineAsync() is not null)
            {
            }

            Environment.Exit(0);
        });

        Console.WriteLine("ports " + string.Join(',', listeners.Select(l => ((IPEndPoint)l.LocalEndpoint).Port)));
        var received = 0;
        var sessions = 0;
        foreach (var listener in listeners)
        {
            _ = Task.Run(async () =>
            {
                while (true)
                {
                    var socket = await listener.AcceptSocketAsync();
                    _ = Task.Run(() => ServeAsync(socket));
                }
            });
        }

        async Task ServeAsync(Socket socket)
        {
            var buffer = new byte[16 << 10];
            var filled = 0;
            while (true)
            {
                var end = buffer.AsSpan(0, filled).IndexOf("\r\n\r\n"u8);
                if (end < 0)
                {
                    var read = await socket.ReceiveAsync(buffer.AsMemory(filled));
                    if (read == 0)
                    {
                        return;
                    }

                    filled += read;
                    continue;
                }

                var head = Encoding.ASCII.GetString(buffer, 0, end);
                var length = head.Split("\r\n").Where(h => h.StartsWith("Content-Length:", StringComparison.OrdinalIgnoreCase))
                    .Select(h => int.Parse(h["Content-Length:".Length..].Trim(), CultureInfo.InvariantCulture)).FirstOrDefault();
                var consumed = end + 4;
                var have = Math.Min(length, filled - consumed);
                var skip = length - have;
                Array.Copy(buffer, consumed + have, buffer, 0, filled - consumed - have);
                filled -= consumed + have;
                while (skip > 0)
                {
                    var read = await socket.ReceiveAsync(buffer.AsMemory(filled, Math.Min(skip, buffer.Length - filled)));
                    if (read == 0)
                    {
                        return;
                    }

                    skip -= read;
                }

                if (head.StartsWith("POST /ps/sessions ", StringComparison.Ordinal))
                {
                    var id = $"held-{Interlocked.Increment(ref sessions)}";
                    await socket.SendAsync(Encoding.ASCII.GetBytes($"HTTP/1.1 201 Created\r\nPS-Session: {id}\r\nContent-Length: 0\r\n\r\n"));
                }
                else
                {
                    Interlocked.Increment(ref received); // held: never answered
                }
            }
        }

        var printed = -1;
        while (true)
        {
            await Task.Delay(100);
            var now = Volatile.Read(ref received);
            if (now != printed)
            {
                Console.WriteLine($"received {now}");
                Console.Out.Flush();
                printed = now;
            }
        }
    }
}
