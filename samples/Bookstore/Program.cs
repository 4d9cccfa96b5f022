using Bookstore.Launcher;
using Bookstore.Services;

// The online bookstore of [Phoenix/App §5.5] (README.md):
//   Bookstore [run] [options]     starts every service as its own process, runs BookBuyer, stops them all (the default)
//   Bookstore table8 [options]    reproduces Table 8: forces and time per buyer loop for configurations a–d
//   Bookstore buyer --base-url NAME=URL …   BookBuyer alone against services that run elsewhere (a cluster, containers)
//   Bookstore serve <component>   one service (store | pricegrabber | tax | seller); the launcher starts these
var command = args.Length > 0 && !args[0].StartsWith("--", StringComparison.Ordinal) ? args[0] : "run";
var rest = args.Length > 0 && command == args[0] ? args[1..] : args;
try
{
    return command switch
    {
        "serve" when rest.Length > 0 && rest[0] == "gateway" => await GatewayHost.RunAsync(rest[1..]),
        "serve" when rest.Length > 0 => await ComponentHost.RunAsync(rest[0], rest[1..]),
        "run" => await RunCommand.RunAsync(LauncherOptions.Parse(rest, command)),
        "table8" => await Table8Command.RunAsync(LauncherOptions.Parse(rest, command)),
        "buyer" => await BuyerCommand.RunAsync(rest),
        _ => Usage(),
    };
}
catch (ArgumentException ex) when (command != "serve")
{
    await Console.Error.WriteLineAsync(ex.Message);
    return Usage();
}

static int Usage()
{
    Console.Error.WriteLine("usage: Bookstore [run] [--loops N] [--seconds S] [--stores N] [--buyers N] [--config a|b|c|d] [--chaos] [--chaos-interval MIN-MAX] [--seed N] [--plain] [--gateway] [--plain-clients] [--upgrade] [--replicas N [--lose-node]] [--keep] [--data DIR]");
    Console.Error.WriteLine("       Bookstore table8 [--loops N] [--warmup N] [--rounds N] [--stores N]");
    Console.Error.WriteLine("       Bookstore buyer --base-url pricegrabber=URL --base-url bookseller=URL --base-url STORE=URL … [--loops N | --seconds S] [--quiet]");
    Console.Error.WriteLine("       Bookstore serve store|pricegrabber|tax|seller|gateway   (started by the launcher, or in a container)");
    return 2;
}
