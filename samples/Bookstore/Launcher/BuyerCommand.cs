using System.Diagnostics;
using System.Globalization;
using Bookstore.Buyer;

namespace Bookstore.Launcher;

/// <summary>
/// BookBuyer alone, against services that run elsewhere (README.md, "Kubernetes"; docs/operations.md): a cluster reached
/// through <c>kubectl port-forward</c>, containers, or processes started with <c>serve</c>. The same loops and the same
/// reconciliation as the one command: the stores' inventories and ledgers and BookSeller's ledger are read before the
/// first loop and after the last, and every change must be what the buyer was told. It restarts nothing: when a service
/// goes away (a deleted pod, a rollout) the buyer resends until it is back. One buyer at a time: the reconciliation
/// counts every change at the stores as this buyer's. Prints <c>RESULT loops=… mismatches=… duplicates=…</c> last; exit
/// status 0 reconciled, 3 a mismatch, 1 an error or an interrupted run, 2 bad arguments.
/// </summary>
internal static class BuyerCommand
{
    public const string PriceGrabber = "pricegrabber";
    public const string Seller = "bookseller";

    public static async Task<int> RunAsync(IReadOnlyList<string> args)
    {
        Options options;
        try
        {
            options = Options.Parse(args);
        }
        catch (Exception ex) when (ex is ArgumentException or FormatException or OverflowException)
        {
            await Console.Error.WriteLineAsync(ex.Message);
            await Console.Error.WriteLineAsync("usage: Bookstore buyer --base-url pricegrabber=URL --base-url bookseller=URL --base-url STORE=URL [--base-url STORE=URL …] [--loops N | --seconds S] [--quiet]");
            return 2;
        }

        var clock = Stopwatch.StartNew();
        void Say(string text) => Console.WriteLine(string.Create(CultureInfo.InvariantCulture, $"[{clock.Elapsed.TotalSeconds,7:0.0}s] {text}"));

        // Ctrl+C: finish the current loop and reconcile; a second Ctrl+C stops at once (not reconciled).
        using var abort = new CancellationTokenSource();
        using var finish = new CancellationTokenSource();
        ConsoleCancelEventHandler onCancel = (_, e) =>
        {
            e.Cancel = true;
            if (finish.IsCancellationRequested)
            {
                abort.Cancel();
            }
            else
            {
                finish.Cancel();
                Say("Ctrl+C: stopping after this loop (Ctrl+C again: at once)");
            }
        };
        Console.CancelKeyPress += onCancel;

        var stores = options.Stores;
        Say($"BookBuyer against {options.PriceGrabber} (PriceGrabber), {options.Seller} (BookSeller) and {stores.Count} stores: {string.Join(", ", stores.Select(s => $"{s.Name} {s.Url}"))}");
        using var priceGrabber = new SessionClient(PriceGrabber, options.PriceGrabber, Say);
        using var seller = new SessionClient(Seller, options.Seller, Say);
        var buyer = new BookBuyer(priceGrabber, seller, [.. stores.Select(s => s.Name)]);
        try
        {
            await buyer.StartAsync(abort.Token);
            var before = await Reconciliation.ReadAsync(stores, options.Seller, abort.Token, patience: TimeSpan.FromMinutes(2));
            var missing = stores.Select(s => s.Name).Where(name => before.Stores[name].Store != name).ToList();
            if (missing.Count > 0)
            {
                // A store answers with its own name: a --base-url that names a store wrongly would count another's books.
                throw new InvalidOperationException($"a store answered under another name than its --base-url gave: {string.Join(", ", missing.Select(n => $"{n} is '{before.Stores[n].Store}'"))}");
            }

            var loopsStarted = clock.Elapsed;
            var loopClock = new Stopwatch();
            while (!finish.IsCancellationRequested
                   && (options.Seconds is { } seconds ? clock.Elapsed - loopsStarted < TimeSpan.FromSeconds(seconds) : buyer.Loops < options.Loops))
            {
                loopClock.Restart();
                var steps = new List<string>();
                await buyer.RunLoopAsync(step => steps.Add($"{step.Operation} {step.Text}"), abort.Token);
                if (!options.Quiet)
                {
                    Say(string.Create(CultureInfo.InvariantCulture, $"loop {buyer.Loops}: {loopClock.Elapsed.TotalMilliseconds:0} ms; {string.Join("; ", steps)}"));
                }
            }

            var loopTime = clock.Elapsed - loopsStarted;
            Say("reconciling (reading every store's inventory and ledger and BookSeller's ledger) …");
            var after = await Reconciliation.ReadAsync(stores, options.Seller, abort.Token, patience: TimeSpan.FromMinutes(2));
            var result = await Reconciliation.CheckAsync(before, after, [buyer], abort.Token);
            Console.CancelKeyPress -= onCancel;

            Console.WriteLine();
            if (buyer.Loops > 0)
            {
                Console.WriteLine(string.Create(CultureInfo.InvariantCulture,
                    $"BookBuyer: {buyer.Loops} loops in {loopTime.TotalSeconds:0.0} s ({loopTime.TotalMilliseconds / buyer.Loops:0.0} ms per loop), {buyer.Retries} resends"));
            }

            foreach (var mismatch in result.Mismatches)
            {
                Console.WriteLine($"MISMATCH {mismatch}");
            }

            Console.WriteLine(result.Mismatches.Count == 0 && result.Duplicates == 0
                ? $"reconciled: baskets, stock, sold and returned counts match what the buyer was told; {result.StoreExecutions} store calls and {result.SellerExecutions} BookSeller requests each executed once"
                : $"NOT reconciled: {result.Mismatches.Count} mismatches, {result.Duplicates} duplicate executions");
            Console.WriteLine(string.Create(CultureInfo.InvariantCulture,
                $"RESULT loops={buyer.Loops} mismatches={result.Mismatches.Count} duplicates={result.Duplicates} store_executions={result.StoreExecutions} seller_executions={result.SellerExecutions} resends={buyer.Retries}"));
            return result.Mismatches.Count == 0 && result.Duplicates == 0 ? 0 : 3;
        }
        catch (OperationCanceledException) when (abort.IsCancellationRequested)
        {
            Console.WriteLine("interrupted during an operation: not reconciled (its outcome is unknown to the buyer).");
            return 1;
        }
        catch (Exception ex) when (ex is InvalidOperationException or HttpRequestException or TimeoutException or TaskCanceledException)
        {
            Console.WriteLine($"error: {ex.Message}");
            return 1;
        }
        finally
        {
            Console.CancelKeyPress -= onCancel;
        }
    }

    private sealed class Options
    {
        public Uri PriceGrabber { get; private set; } = null!;

        public Uri Seller { get; private set; } = null!;

        public List<(string Name, Uri Url)> Stores { get; } = [];

        public int Loops { get; private set; } = 200;

        public double? Seconds { get; private set; }

        public bool Quiet { get; private set; }

        public static Options Parse(IReadOnlyList<string> args)
        {
            var options = new Options();
            Uri? priceGrabber = null;
            Uri? seller = null;
            for (var i = 0; i < args.Count; i++)
            {
                string Value() => i + 1 < args.Count ? args[++i] : throw new ArgumentException($"{args[i]} needs a value");
                switch (args[i])
                {
                    case "--base-url":
                        var entry = Value();
                        var parts = entry.Split('=', 2);
                        if (parts.Length != 2 || parts[0].Length == 0 || !Uri.TryCreate(parts[1], UriKind.Absolute, out var url) || url.Scheme is not ("http" or "https"))
                        {
                            throw new ArgumentException($"--base-url {entry}: expected NAME=http://host:port (NAME is pricegrabber, bookseller or a store's service name)");
                        }

                        switch (parts[0])
                        {
                            case BuyerCommand.PriceGrabber:
                                priceGrabber = url;
                                break;
                            case BuyerCommand.Seller:
                                seller = url;
                                break;
                            default:
                                if (options.Stores.Any(s => s.Name == parts[0]))
                                {
                                    throw new ArgumentException($"--base-url: store {parts[0]} given twice");
                                }

                                options.Stores.Add((parts[0], url));
                                break;
                        }

                        break;
                    case "--loops":
                        options.Loops = int.Parse(Value(), NumberStyles.None, CultureInfo.InvariantCulture);
                        break;
                    case "--seconds":
                        options.Seconds = double.Parse(Value(), CultureInfo.InvariantCulture);
                        break;
                    case "--quiet":
                        options.Quiet = true;
                        break;
                    case "--plain":
                        break; // the buyer's output is always plain lines; accepted as the launcher's option is
                    default:
                        throw new ArgumentException($"unknown option {args[i]}");
                }
            }

            options.PriceGrabber = priceGrabber ?? throw new ArgumentException("--base-url pricegrabber=URL is required");
            options.Seller = seller ?? throw new ArgumentException("--base-url bookseller=URL is required");
            if (options.Stores.Count == 0)
            {
                throw new ArgumentException("at least one store is required: --base-url store-0=URL …");
            }

            return options;
        }
    }
}
