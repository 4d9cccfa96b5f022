using System.Globalization;

namespace Bookstore.Launcher;

/// <summary>The launcher's command line (README.md lists it).</summary>
internal sealed class LauncherOptions
{
    public int Loops { get; private set; } = 200;

    public double? Seconds { get; private set; }

    public int Stores { get; private set; } = 3;

    /// <summary>BookBuyers running at once, each with its own sessions and basket (default 1).</summary>
    public int Buyers { get; private set; } = 1;

    public LoggingConfiguration Configuration { get; private set; } = LoggingConfiguration.Parse("d");

    public bool Chaos { get; private set; }

    public (double Min, double Max) ChaosInterval { get; private set; } = (1.0, 3.0);

    public int Seed { get; private set; } = Environment.TickCount;

    public bool Plain { get; private set; }

    /// <summary>The buyer also plays a client that never retries: errors on a request's first send are counted (README.md).</summary>
    public bool PlainClients { get; private set; }

    /// <summary>The buyer reaches PriceGrabber and BookSeller through the gateway (docs/gateway.md), which holds its requests through restarts.</summary>
    public bool Gateway { get; private set; }

    /// <summary>Replace every service in turn by a new build, round after round, while the buyer runs (README.md, "Upgrades").</summary>
    public bool Upgrade { get; private set; }

    /// <summary>Replicas per persistent service (<c>--replicas N</c>, README.md "Replicas"): each is a group of N + 1 log nodes with Raft failover; 0: none.</summary>
    public int Replicas { get; private set; }

    /// <summary>With <c>--chaos</c> and replicas: a killed primary's whole log directory is deleted before it comes back (a lost node).</summary>
    public bool LoseNode { get; private set; }

    public bool Keep { get; private set; }

    public string? DataDirectory { get; private set; }

    /// <summary>For testing the reconciliation itself: a service that died restarts with its log deleted (it forgets); chaos then kills only stores.</summary>
    public bool WipeOnRestart { get; private set; }

    // table8
    /// <summary>Loops before measuring: enough for every endpoint of six processes to be JIT-compiled at tier 1 (tens of calls each).</summary>
    public int Warmup { get; private set; } = 60;

    public int Rounds { get; private set; } = 3;

    public static LauncherOptions Parse(IReadOnlyList<string> args, string command)
    {
        var options = new LauncherOptions();
        if (command == "table8")
        {
            options.Loops = 100;
        }

        for (var i = 0; i < args.Count; i++)
        {
            string Value() => i + 1 < args.Count ? args[++i] : throw new ArgumentException($"{args[i]} needs a value");
            int Int() => int.Parse(Value(), NumberStyles.None, CultureInfo.InvariantCulture);
            switch (args[i])
            {
                case "--loops":
                    options.Loops = Int();
                    break;
                case "--seconds":
                    options.Seconds = double.Parse(Value(), CultureInfo.InvariantCulture);
                    break;
                case "--buyers":
                    options.Buyers = Math.Clamp(Int(), 1, 64);
                    break;
                case "--stores":
                    options.Stores = Math.Clamp(Int(), 1, 20);
                    break;
                case "--config":
                    options.Configuration = LoggingConfiguration.Parse(Value());
                    break;
                case "--chaos":
                    options.Chaos = true;
                    break;
                case "--chaos-interval":
                    var parts = Value().Split('-', 2);
                    var min = double.Parse(parts[0], CultureInfo.InvariantCulture);
                    options.ChaosInterval = (min, parts.Length > 1 ? double.Parse(parts[1], CultureInfo.InvariantCulture) : min);
                    options.Chaos = true;
                    break;
                case "--seed":
                    options.Seed = Int();
                    break;
                case "--plain":
                    options.Plain = true;
                    break;
                case "--plain-clients":
                    options.PlainClients = true;
                    break;
                case "--gateway":
                    options.Gateway = true;
                    break;
                case "--upgrade":
                    options.Upgrade = true;
                    break;
                case "--replicas":
                    options.Replicas = Int();
                    break;
                case "--lose-node":
                    options.LoseNode = true;
                    break;
                case "--keep":
                    options.Keep = true;
                    break;
                case "--data":
                    options.DataDirectory = Path.GetFullPath(Value());
                    options.Keep = true;
                    break;
                case "--wipe-on-restart":
                    options.WipeOnRestart = true;
                    break;
                case "--warmup":
                    options.Warmup = Int();
                    break;
                case "--rounds":
                    options.Rounds = Math.Max(1, Int());
                    break;
                default:
                    throw new ArgumentException($"unknown option {args[i]}");
            }
        }

        if (options.Replicas is < 0 or > 4)
        {
            throw new ArgumentException($"--replicas must be between 0 and 4 (was {options.Replicas}): N replicas per persistent service, a group of N + 1 log nodes");
        }

        if (options.Replicas > 0 && options.Upgrade && options.Chaos)
        {
            throw new ArgumentException(
                "--replicas --upgrade cannot be combined with --chaos: a primary killed while its group runs two builds is replaced by a replica of the new build, " +
                "which replays the old build's requests since each session's last checkpoint with the new code, and BookSeller's new replies differ (docs/upgrades.md, " +
                "\"A replicated service\"); upgrade by switchover, or kill without upgrading");
        }

        if (options.Replicas > 0 && options.WipeOnRestart)
        {
            throw new ArgumentException("--replicas cannot be combined with --wipe-on-restart: use --lose-node (a killed primary's log deleted; its group brings it up to date)");
        }

        if (options.LoseNode && (options.Replicas == 0 || !options.Chaos))
        {
            throw new ArgumentException("--lose-node needs --replicas N and --chaos: a killed primary comes back with its log directory deleted, and its group brings it up to date (without replicas that log would be lost: --wipe-on-restart)");
        }

        return options;
    }
}
