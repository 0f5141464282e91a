from durable_agent.cli import main

main()
